"""rtctl, the operator's CLI. Each command group lives in its own `cli_*` module that
registers its subcommands; a refusal prints `CODE: reason` on stderr and exits 2."""
import argparse
import json
import sys

from rtd.daemon import cli_doctor, cli_package, cli_serving
from rtd.errors import RtdError

COMMAND_MODULES = (cli_package, cli_serving, cli_doctor,)  # each module: register(subparsers) adding parsers with set_defaults(func=...)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="rtctl", description="Operate an rtd model runtime daemon.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(commands)
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except RtdError as e:
        if getattr(args, "json", False):
            print(json.dumps({"ok": False, **e.to_json()}))
        print(str(e), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
