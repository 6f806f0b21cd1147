"""rtctl, the operator's CLI. Each command group lives in its own module of this folder that
registers its subcommands; every failure is one line `CODE: reason` on stderr
(rtd.commandline.run), with the exit statuses listed in `rtctl --help`."""
import argparse
import sys

from rtd import commandline
from rtd.cli import doctor, package, serving, trust

COMMAND_MODULES = (package, trust, serving, doctor)  # each module: register(subparsers) adding parsers with set_defaults(func=...)


def main(argv=None) -> int:
    parser = commandline.Parser(prog="rtctl", description="Operate an rtd model runtime daemon.",
                               epilog=commandline.EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(commands)
    args = parser.parse_args(argv)
    return commandline.run(args.func, args, getattr(args, "json", False))


if __name__ == "__main__":
    sys.exit(main())
