"""Run SQL steps against a real ClickHouse engine (chdb) for the Rust tests.

Why this exists: the ClickHouse engine the tests use is chdb
(`pip install chdb-core-lite==26.5.0`, ClickHouse 26.5), which runs *inside*
a Python process and has no HTTP or native port to connect to. The Rust
harness (`tests/harness/clickhouse.rs`) therefore spawns this script once per
scenario, hands it the steps on stdin and reads the results from stdout.
Nothing here interprets SQL: each step goes to the engine as written, so the
tests see the engine's own behaviour and error codes.

Protocol (one JSON document each way, UTF-8):

request on stdin::

    {"steps": [
        {"sql": "INSERT INTO db.t SETTINGS ... FORMAT JSONEachRow",
         "data": "{\\"a\\":1}\\n{\\"a\\":2}",   # optional: appended to sql after a newline
         "format": "JSONEachRow",              # optional output format, default TabSeparated;
                                               # a FORMAT clause inside sql wins
         "expect_error": true},                # optional, default false
        ...
    ]}

response on stdout::

    {"engine_version": "26.5.1.1",
     "results": [
        {"ok": true,  "output": "<the engine's text output>"},
        {"ok": false, "code": 117, "name": "INCORRECT_DATA",
         "message": "Code: 117. DB::Exception: ..."},
        ...
    ]}

All steps run in order in ONE fresh chdb session whose data lives in a new
temporary directory, removed at the end. A failing step stops the run unless
it says "expect_error": true, so `results` can be shorter than `steps`: its
last entry is then the unexpected failure. `code` and `name` are parsed from
the engine's "Code: N. DB::Exception: ... (NAME)" text and are null when the
error did not come from the engine. An `expect_error` step that succeeds is
reported as it is (ok: true); the caller decides that this is a failure.

chdb has no separate channel for INSERT data: `data` is sent inline after the
statement, so any SETTINGS clause must come before FORMAT (after it, the
SETTINGS text is parsed as data: Code 27).

Exit status 0 whenever a response was written (whatever the steps did);
2 for a malformed request, with the reason on stderr.
"""

import json
import os
import re
import shutil
import sys
import tempfile

_CODE = re.compile(r"^\s*Code:\s*(\d+)\.")
_NAME = re.compile(r"\(([A-Z][A-Z0-9_]*)\)\s*$")


def _parse_error(message):
    code = _CODE.search(message)
    name = _NAME.search(message)
    return (int(code.group(1)) if code else None, name.group(1) if name else None)


def _validate(request):
    steps = request.get("steps") if isinstance(request, dict) else None
    if not isinstance(steps, list):
        raise ValueError('request must be an object with a "steps" array')
    for i, step in enumerate(steps):
        if not isinstance(step, dict) or not isinstance(step.get("sql"), str):
            raise ValueError(f'step {i}: must be an object with a string "sql"')
        for key, kind in (("data", str), ("format", str), ("expect_error", bool)):
            if step.get(key) is not None and not isinstance(step[key], kind):
                raise ValueError(f'step {i}: "{key}" must be a {kind.__name__}')
        unknown = set(step) - {"sql", "data", "format", "expect_error"}
        if unknown:
            raise ValueError(f"step {i}: unknown keys {sorted(unknown)}")
    return steps


def main():
    # The engine is native code in this process and may write to fd 1; keep
    # the real stdout for the response and send everything else to stderr.
    response_fd = os.dup(1)
    os.dup2(2, 1)

    try:
        steps = _validate(json.loads(sys.stdin.buffer.read().decode("utf-8")))
    except ValueError as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
        print(f"chdb_runner: bad request: {e}", file=sys.stderr)
        return 2

    import chdb
    from chdb import session

    results = []
    workdir = tempfile.mkdtemp(prefix="alkstore-chdb-")
    try:
        sess = session.Session(workdir)
        try:
            for step in steps:
                sql = step["sql"]
                if step.get("data") is not None:
                    sql = sql + "\n" + step["data"]
                try:
                    raw = sess.query(sql, step.get("format") or "TabSeparated").bytes()
                    results.append({"ok": True, "output": raw.decode("utf-8", "replace")})
                except Exception as e:  # chdb raises RuntimeError carrying the engine's text
                    message = str(e)
                    code, name = _parse_error(message)
                    results.append({"ok": False, "code": code, "name": name, "message": message})
                    if not step.get("expect_error", False):
                        break
        finally:
            sess.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    response = {"engine_version": chdb.engine_version, "results": results}
    with os.fdopen(response_fd, "w", encoding="utf-8") as out:
        json.dump(response, out)
        out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
