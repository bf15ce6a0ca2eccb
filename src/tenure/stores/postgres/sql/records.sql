-- Records (tenure once), within version 3: a table no older client touches, so schema.py also
-- creates it on connecting when it is missing. The key in the "C" collation: its order is the
-- byte order of its UTF-8, and a prefix listing is one index range. request: the request id of
-- the write that set the version (see write_record).
CREATE TABLE IF NOT EXISTS {s}.records (
    key text COLLATE "C" PRIMARY KEY, value text NOT NULL, version bigint NOT NULL,
    request bigint);
