#!/usr/bin/env python3
"""Make the etcd store's gRPC messages: src/tenure/stores/etcd/proto/.

etcd publishes its v3 API as .proto files (api/etcdserverpb/rpc.proto, api/mvccpb/kv.proto,
api/authpb/auth.proto). The committed copies are those files stripped of what only etcd's own
Go build reads (the grpc-gateway and OpenAPI annotations, etcd's version options, go_package),
with their packages moved under ``tenure.`` so that they never clash with another etcd client's
messages in one process (aetcd and python-etcd3 register ``etcdserverpb`` too; the wire does
not carry message names, and the store calls the methods by their own path,
``/etcdserverpb.KV/Txn``). The gateway path of every method (``kv/txn``, from the stripped
annotation) goes to ``paths.py``.

    .venv/bin/python scripts/etcd_protos.py                     # regenerate the *_pb2.py files
    .venv/bin/python scripts/etcd_protos.py --from ../etcd      # strip etcd's .proto files again
    .venv/bin/python scripts/etcd_protos.py --check             # exit 1 if anything is stale

Needs grpcio-tools (the ``test`` extra): its protoc writes the *_pb2.py files, which need a
protobuf runtime at least as new as that protoc (the ``etcd`` extra says which).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PACKAGE = "tenure/stores/etcd/proto"
OUT = SRC / PACKAGE
SOURCES = {  # our file name → etcd's
    "kv.proto": "api/mvccpb/kv.proto",
    "auth.proto": "api/authpb/auth.proto",
    "rpc.proto": "api/etcdserverpb/rpc.proto",
}
HEADER = (
    "// Stripped from etcd's {source} by scripts/etcd_protos.py: no gateway, OpenAPI or\n"
    "// version annotations; its package under tenure. (the same wire).\n"
)
_RPC = re.compile(r"^\s*rpc\s+(\w+)\s*\(")
_SERVICE = re.compile(r"^\s*service\s+(\w+)\s*\{")
_POST = re.compile(r'post:\s*"/v3/([^"]+)"')
_FIELD_OPTION = re.compile(r"\s*\[\(versionpb\.[a-z_]+\)\s*=\s*\"[^\"]*\"\]")


def _block_end(lines: list[str], start: int) -> int:
    """The index of the line that closes the ``{`` block opened on line ``start``."""
    depth = 0
    for index in range(start, len(lines)):
        depth += lines[index].count("{") - lines[index].count("}")
        if depth <= 0:
            return index
    raise ValueError(f"unclosed block from line {start + 1}")


def strip(text: str, source: str) -> tuple[str, dict[str, str]]:
    """The stripped .proto text, and its gateway paths (``kv/txn`` → ``KV/Txn``)."""
    lines = text.splitlines()
    kept: list[str] = []
    paths: dict[str, str] = {}
    service = method = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        if stripped.startswith("option (") and "{" in stripped:
            end = _block_end(lines, index)
            for post in _POST.findall("\n".join(lines[index : end + 1])):
                paths[post] = f"{service}/{method}"
            index = end + 1
            continue
        index += 1
        if stripped.startswith(("option (versionpb.", "option go_package")):
            continue
        if stripped.startswith("import "):
            name = stripped.split('"')[1]
            if not name.startswith("etcd/api/") or "versionpb" in name:
                continue
            line = f'import "{PACKAGE}/{Path(name).name}";'
        if stripped.startswith("package "):
            line = f"package tenure.{stripped.split()[1]}"
        found = _SERVICE.match(line)
        if found:
            service = found.group(1)
        found = _RPC.match(line)
        if found:
            method = found.group(1)
        kept.append(_FIELD_OPTION.sub("", line).rstrip())
    body = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip() + "\n"
    return HEADER.format(source=source) + body, paths


def paths_module(paths: dict[str, str]) -> str:
    rows = "".join(f'    "{path}": "{method}",\n' for path, method in sorted(paths.items()))
    return (
        '"""etcd\'s gateway paths and the gRPC methods they stand for (made by\n'
        'scripts/etcd_protos.py from rpc.proto\'s annotations)."""\n\n'
        f"PATHS: dict[str, str] = {{\n{rows}}}\n"
    )


def generate(protos: Path, into: Path) -> None:
    """Run protoc (grpcio-tools) on the .proto files under ``protos`` (laid out as ``src``)."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    into.mkdir(parents=True, exist_ok=True)
    names = [f"{PACKAGE}/{name}" for name in SOURCES]
    code = protoc.main(["protoc", f"-I{protos}", f"--python_out={into}", *names])
    if code != 0:
        raise SystemExit(f"protoc failed ({code})")


def expected(etcd: Path | None) -> dict[Path, str]:
    """Every file under proto/ as it should be (the .proto files re-stripped from ``etcd``,
    else as committed)."""
    files: dict[Path, str] = {}
    if etcd is not None:
        paths: dict[str, str] = {}
        for name, source in SOURCES.items():
            text, found = strip((etcd / source).read_text(), source)
            files[OUT / name] = text
            paths.update(found)
        files[OUT / "paths.py"] = paths_module(paths)
    else:
        for name in SOURCES:
            files[OUT / name] = (OUT / name).read_text()
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "src"
        for path, text in files.items():
            if path.suffix == ".proto":
                target = tree / path.relative_to(SRC)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        generate(tree, Path(tmp) / "out")
        for made in sorted((Path(tmp) / "out" / PACKAGE).glob("*_pb2.py")):
            files[OUT / made.name] = made.read_text()
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="etcd", type=Path, help="an etcd source checkout")
    parser.add_argument("--check", action="store_true", help="only say whether files are stale")
    args = parser.parse_args()
    stale = []
    for path, text in expected(args.etcd).items():
        if not path.exists() or path.read_text() != text:
            stale.append(path.relative_to(ROOT))
            if not args.check:
                path.write_text(text)
    if args.check and stale:
        print(f"stale: {', '.join(map(str, stale))} (run scripts/etcd_protos.py)")
        return 1
    if stale:
        print(f"wrote {', '.join(map(str, stale))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
