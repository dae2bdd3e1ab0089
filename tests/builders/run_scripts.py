"""Run several ``python -m MODULE ARGS...`` commands in one Python process, one after another.

Each command runs as ``-m`` runs it (``runpy.run_module`` as ``__main__``, ``sys.argv`` set), its
stdout and stderr captured apart, and torch's compiled-code caches are reset between commands so
that none inherits another's graphs. What a command costs beyond its own work, the start of
Python and the import of torch and fairseq, is paid once for all of them.

    python -m builders.run_scripts RESULTS.json < COMMANDS.json

COMMANDS.json is a list of ``[module, [arguments...]]``; RESULTS.json gets one
``{"module", "returncode", "stdout", "stderr"}`` per command, in order.
"""

import contextlib
import io
import json
import runpy
import sys
import traceback

import torch


def run(module: str, arguments: list[str]) -> dict:
    stdout, stderr = io.StringIO(), io.StringIO()
    saved_argv = sys.argv
    sys.argv = [module, *arguments]
    returncode = 0
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        if stop.code not in (None, 0):
            returncode = stop.code if isinstance(stop.code, int) else 1
            if not isinstance(stop.code, int):
                stderr.write(f"{stop.code}\n")
    except Exception:  # a failing command is reported, and the next one still runs
        returncode = 1
        stderr.write(traceback.format_exc())
    finally:
        sys.argv = saved_argv
        torch._dynamo.reset()
    return {"module": module, "returncode": returncode, "stdout": stdout.getvalue(), "stderr": stderr.getvalue()}


def main() -> None:
    commands = json.load(sys.stdin)
    results = [run(module, arguments) for module, arguments in commands]
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        json.dump(results, out)


if __name__ == "__main__":
    main()
