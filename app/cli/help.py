"""`hostnet-rdma help [TOPIC]`: a section of the troubleshooting guide, as the messages name it."""

from __future__ import annotations

import argparse
from typing import Any

from app import help as guide
from app.cli.common import error


def cmd_help(args: argparse.Namespace) -> int:
    try:
        text = guide.document()
    except FileNotFoundError as e:
        return error(str(e))
    topics = guide.sections(text)
    if not args.topic:
        print("Topics (hostnet-rdma help TOPIC; any words of a title work too):")
        for topic, (title, _) in topics.items():
            print(f"  {topic}\n      {title}")
        return 0
    found = guide.find(text, " ".join(args.topic))
    if len(found) == 1:
        title, body = topics[found[0]]
        print(f"{title}\n\n{body}")
        return 0
    if found:
        print("Several topics match; pick one:")
        print("\n".join(f"  {t}" for t in found))
        return 2
    return error(f"no topic {' '.join(args.topic)!r}: `hostnet-rdma help` lists them")


def register(sub: Any) -> None:
    h = sub.add_parser("help", help="a troubleshooting topic (the messages name them); no TOPIC lists them")
    h.add_argument("topic", nargs="*", help="a topic, or words of its title")
    h.set_defaults(func=cmd_help)
