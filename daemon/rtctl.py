"""rtctl, the operator's CLI. Each command group lives in its own `cli_*` module that
registers its subcommands; every failure is one line `CODE: reason` on stderr
(cli_errors.run), with the exit statuses listed in `rtctl --help`."""
import argparse
import sys

from rtd.daemon import cli_doctor, cli_errors, cli_package, cli_serving, cli_trust

COMMAND_MODULES = (cli_package, cli_trust, cli_serving, cli_doctor,)  # each module: register(subparsers) adding parsers with set_defaults(func=...)


def main(argv=None) -> int:
    parser = cli_errors.Parser(prog="rtctl", description="Operate an rtd model runtime daemon.",
                               epilog=cli_errors.EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(commands)
    args = parser.parse_args(argv)
    return cli_errors.run(args.func, args, getattr(args, "json", False))


if __name__ == "__main__":
    sys.exit(main())
