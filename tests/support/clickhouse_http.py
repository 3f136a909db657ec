"""A ClickHouse HTTP interface in front of the real ClickHouse engine (chdb), for tests.

Speaks what the `clickhouse` Rust crate (0.15) sends:
  * the query in the URL (`?query=`), in the body, or both (URL text, newline, body);
  * multipart/form-data bodies carrying `query` and `param_<name>` fields (bound parameters);
  * `param_<name>` URL parameters;
  * INSERT ... FORMAT <fmt> with the rows as the (chunked) body: the rows are written to a temp
    file and inserted with `INSERT ... FROM INFILE`;
  * `decompress=1`: the body is in ClickHouse's compressed-block format (LZ4 or none), with the
    CityHash128 checksum of each block verified;
  * any other URL parameter is a setting (`SET k = v` for the duration of the query), e.g.
    `insert_deduplication_token`;
  * errors as status 500 with the `Code: N. DB::Exception: ...` text and the
    `X-ClickHouse-Exception-Code` header.
Responses are never compressed (the crate reads plain bodies unless the server adds
Content-Encoding). chdb runs one query at a time, so every request takes one lock.

Usage: python clickhouse_http.py --data-dir DIR [--port 0]
Prints `clickhouse-http listening on http://127.0.0.1:PORT` once ready.
"""

from __future__ import annotations

import argparse
import os
import re
import struct
import sys
import threading
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

import lz4.block
from chdb import session
from clickhouse_cityhash.cityhash import CityHash128

# URL parameters that are not settings.
NOT_SETTINGS = {
    "query", "database", "default_format", "decompress", "compress", "query_id", "session_id",
    "user", "password", "wait_end_of_query", "role",
}
INSERT_WITH_DATA = re.compile(r"^\s*INSERT\s+INTO\s+(.+?)\s+FORMAT\s+(\w+)\s*;?\s*$", re.I | re.S)
SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ERROR_CODE = re.compile(r"Code: (\d+)\.")


class ClickHouseError(Exception):
    def __init__(self, message: str, code: int = 1001, status: int = 500):
        super().__init__(message)
        self.code = code
        self.status = status


def checksum(block: bytes) -> int:
    """ClickHouse's block checksum: CityHash128 v1.0.2 with its 64-bit halves swapped relative to
    this binding's integer, stored little-endian (what ClickHouse and the Rust crate write)."""
    h = CityHash128(block)
    return ((h & (2**64 - 1)) << 64) | (h >> 64)


def decompress_blocks(data: bytes) -> bytes:
    """Decodes ClickHouse's compressed-block framing: checksum(16) method(1) size(4) raw(4)."""
    out = bytearray()
    pos = 0
    while pos < len(data):
        if len(data) - pos < 25:
            raise ClickHouseError("Code: 271. DB::Exception: truncated compressed block", 271)
        expected = data[pos : pos + 16]
        method = data[pos + 16]
        compressed_size, raw_size = struct.unpack_from("<II", data, pos + 17)
        block = data[pos + 16 : pos + 16 + compressed_size]
        if len(block) != compressed_size:
            raise ClickHouseError("Code: 271. DB::Exception: truncated compressed block", 271)
        if int.from_bytes(expected, "little") != checksum(block):
            raise ClickHouseError("Code: 40. DB::Exception: checksum doesn't match", 40)
        payload = block[9:]
        if method == 0x82:
            out += lz4.block.decompress(payload, uncompressed_size=raw_size)
        elif method == 0x02:
            out += payload
        else:
            raise ClickHouseError(f"Code: 271. DB::Exception: unknown compression method {method:#x}", 271)
        pos += 16 + compressed_size
    return bytes(out)


def parse_multipart(content_type: str, body: bytes) -> dict[str, str]:
    msg = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
    )
    fields = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        fields[name] = part.get_payload(decode=True).decode()
    return fields


class Engine:
    def __init__(self, data_dir: str):
        self.session = session.Session(data_dir)
        self.lock = threading.Lock()
        # Inside the data dir, which its owner removes: the adapter is usually stopped by a
        # signal, so it never gets to clean up after itself.
        self.tmp = os.path.join(data_dir, "infile")
        os.makedirs(self.tmp, exist_ok=True)

    def run(self, sql: str, fmt: str, settings: dict[str, str], params: dict[str, str], data: bytes | None) -> bytes:
        with self.lock:
            applied = []
            try:
                for name, value in settings.items():
                    if not SETTING_NAME.match(name):
                        raise ClickHouseError(f"Code: 115. DB::Exception: Unknown setting {name}", 115, 400)
                    self.session.query(f"SET {name} = {quote(value)}")
                    applied.append(name)
                if data is not None:
                    m = INSERT_WITH_DATA.match(sql)
                    if not m:
                        raise ClickHouseError("Code: 62. DB::Exception: data sent with a non-INSERT query", 62, 400)
                    path = os.path.join(self.tmp, "rows.bin")
                    with open(path, "wb") as f:
                        f.write(data)
                    sql = f"INSERT INTO {m.group(1)} FROM INFILE {quote(path)} FORMAT {m.group(2)}"
                result = self.session.query(sql, fmt, params=params or None)
                return result.bytes() if result is not None else b""
            except ClickHouseError:
                raise
            except Exception as e:  # chdb raises with ClickHouse's own error text
                text = str(e)
                m = ERROR_CODE.search(text)
                raise ClickHouseError(text, int(m.group(1)) if m else 1001) from None
            finally:
                for name in applied:
                    try:
                        self.session.query(f"SET {name} = DEFAULT")
                    except Exception:
                        pass


def quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    engine: Engine

    def log_message(self, fmt, *args):  # quiet: tests read only errors
        pass

    def read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def answer(self, status: int, body: bytes, extra: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # The client went away (a client dropping a stream, or a killed process): as a
            # server does, drop the answer quietly.
            self.close_connection = True

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path in ("/", "/ping"):
            self.answer(200, b"Ok.\n")
        else:
            self.handle_query(b"")

    def do_POST(self) -> None:
        self.handle_query(self.read_body())

    def handle_query(self, body: bytes) -> None:
        try:
            url = urlsplit(self.path)
            args = dict(parse_qsl(url.query, keep_blank_values=True))
            params = {k[6:]: v for k, v in args.items() if k.startswith("param_")}
            settings = {
                k: v for k, v in args.items() if k not in NOT_SETTINGS and not k.startswith("param_")
            }
            content_type = self.headers.get("Content-Type", "")
            if args.get("decompress") == "1" and body:
                body = decompress_blocks(body)
            data = None
            if content_type.startswith("multipart/form-data"):
                fields = parse_multipart(content_type, body)
                sql = fields.pop("query", args.get("query", ""))
                params.update({k[6:]: v for k, v in fields.items() if k.startswith("param_")})
            elif "query" in args and INSERT_WITH_DATA.match(args["query"]):
                sql, data = args["query"], body
            elif "query" in args:
                sql = args["query"] + ("\n" + body.decode() if body else "")
            else:
                sql = body.decode()
            if not sql.strip():
                raise ClickHouseError("Code: 62. DB::Exception: Empty query", 62, 400)
            if "database" in args and args["database"] not in ("", "default"):
                raise ClickHouseError("Code: 81. DB::Exception: only the default database exists", 81)
            out = self.engine.run(sql, args.get("default_format", "TabSeparated"), settings, params, data)
            self.answer(200, out, {"Content-Type": "application/octet-stream"})
        except ClickHouseError as e:
            self.answer(e.status, (str(e) + "\n").encode(), {
                "X-ClickHouse-Exception-Code": str(e.code),
                "Content-Type": "text/plain; charset=UTF-8",
            })


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    Handler.engine = Engine(a.data_dir)
    server = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    print(f"clickhouse-http listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
