-- The last statement of the setup: the schema now has this version ({version}: SCHEMA_VERSION).
INSERT INTO {s}.meta (key, value) VALUES ('schema', {version})
    ON CONFLICT (key) DO UPDATE SET value = excluded.value;
