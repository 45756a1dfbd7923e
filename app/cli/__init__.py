"""hostnet-rdma: RDMA plumbing and torchrun rendezvous for host-network PyTorch pods.

serve    run the admission webhook
mutate   print the pods of a file (a Pod or a job of any launcher) as the webhook would store them
explain  why a pod was, or would be, mutated or not
verify   check a training pod's log: NCCL over IB with GDRDMA, the wrapper's line
doctor   check a node's RDMA fabric against an NCCL profile (--cluster: the fleet's fabric-watch table)
fabric-watch  the node agent: this node and the paths to its peers, as a node condition
e2e      run a 2-node job per launcher through the webhook and check it end to end
help     the troubleshooting section a message names (`hostnet-rdma help TOPIC`)

As a kubectl plugin (the `kubectl-hostnet_rdma` executable this package installs):
`kubectl hostnet-rdma explain|mutate|verify|doctor|e2e|help ...`, with kubectl's --kubeconfig,
--context and -n/--namespace anywhere on the line.
"""

# One module per command (app/cli/<command>.py, each with register() and its cmd_ function);
# app/cli/common.py is what they share. import-linter keeps the commands independent.

from __future__ import annotations

import argparse

from app import __version__
from app.cli import doctor, e2e, explain, fabricwatch, help, mutate, serve, verify
from app.cli.common import error

COMMANDS = (serve, mutate, explain, verify, doctor, fabricwatch, e2e, help)


def build_parser(prog: str = "hostnet-rdma") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--version", action="version", version=f"hostnet-rdma {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    return _run(_parse(build_parser(), argv))


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The arguments; one the command does not know is refused with that command's usage (the
    top level's told nothing about the command's options)."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


# A reader that closed the pipe early (`| head`): exit as a program killed by SIGPIPE would.
EXIT_PIPE_CLOSED = 141


def _run(args: argparse.Namespace) -> int:
    """The command, with the everyday failures as one line each (never a traceback)."""
    import sys

    try:
        rc: int = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        import os

        # Python would flush stdout again at exit, into the closed pipe, and print an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE_CLOSED
    except Exception as e:
        message = _everyday(e)
        if message is None:
            raise
        return error(message)
    return rc


def _everyday(e: Exception) -> str | None:
    """One line, with the next step, for a failure that is the user's setup, not a bug."""
    from app import kube  # only now: commands that never read a cluster do not load its client

    if isinstance(e, kube.KubeconfigError):
        return str(e)
    import urllib3

    if isinstance(e, urllib3.exceptions.HTTPError):
        reason = getattr(e, "reason", None) or e
        return (f"cannot reach the cluster's API server: {reason} (is it up, and are --kubeconfig and --context "
                "the ones you mean? `kubectl cluster-info` tells)")  # fmt: skip
    if isinstance(e, kube.ApiException):
        return f"the API server refused: {kube.api_message(e)}"
    return None


# What the kubectl plugin offers (serving the webhook is not a kubectl job), and which of
# kubectl's global flags each command takes.
PLUGIN_COMMANDS = {"explain": ("-n", "--kubeconfig", "--context"), "verify": ("-n", "--kubeconfig", "--context"),
                   "mutate": ("-n", "--kubeconfig", "--context"), "doctor": ("--kubeconfig", "--context"), "e2e": ("--kubeconfig", "--context"),
                   "help": ()}  # fmt: skip


def kubectl_main(argv: list[str] | None = None) -> int:
    """`kubectl hostnet-rdma ...`: kubectl runs the executable `kubectl-hostnet_rdma` found on
    PATH (its plugin convention: `_` in the file name is `-` in the command) with the words
    after `hostnet-rdma`. kubectl's global flags may stand anywhere on that line, as users type
    them for kubectl itself; they are handed to the command that uses them."""
    import sys

    words = list(sys.argv[1:] if argv is None else argv)
    flags = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    flags.add_argument("-n", "--namespace")
    flags.add_argument("--kubeconfig")
    flags.add_argument("--context")
    given, rest = flags.parse_known_args(words)
    command = next((w for w in rest if not w.startswith("-")), None)
    if command not in PLUGIN_COMMANDS:
        if not rest or rest[0] in ("-h", "--help"):
            print(__doc__.replace("hostnet-rdma ", "kubectl hostnet-rdma ", 1).split("\n\nAs a kubectl plugin")[0])
            print(f"\nkubectl hostnet-rdma COMMAND --help for a command's options; commands here: "
                  f"{', '.join(PLUGIN_COMMANDS)} (serve runs as the webhook, not from kubectl).")  # fmt: skip
            return 0
        print(f"usage: kubectl hostnet-rdma {{{','.join(PLUGIN_COMMANDS)}}} ...  (see kubectl hostnet-rdma --help)",
              file=sys.stderr)  # fmt: skip
        return 2
    forwarded: list[str] = []
    for flag, value in (("-n", given.namespace), ("--kubeconfig", given.kubeconfig), ("--context", given.context)):
        if value is None:
            continue
        if flag not in PLUGIN_COMMANDS[command]:
            why = "does not read the cluster" if "--context" not in PLUGIN_COMMANDS[command] else "has no use for it"
            print(f"hostnet-rdma: error: {command} {why}: {flag} does not apply", file=sys.stderr)
            return 2
        forwarded += [flag, value]
    at = rest.index(command) + 1
    return _run(_parse(build_parser("kubectl hostnet-rdma"), [*rest[:at], *forwarded, *rest[at:]]))
