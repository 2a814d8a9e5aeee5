"""``foreshock dictionary``: every feature column's name pattern, meaning, unit and window.

Of the configuration in effect (its windows, its catalog or the lake's), or with
``--builtin`` of the built-in one: ``foreshock dictionary --builtin --out
features/dictionary.md`` rewrites the committed dictionary.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from foreshock.config import Config


def run(args: argparse.Namespace, config: Config) -> int:
    from foreshock.features.dictionary import builtin_dictionary, render_dictionary

    if args.builtin:
        text = builtin_dictionary()
    else:
        source = "the built-in defaults" if config.source == "<defaults>" else f"the configuration {config.source}"
        text = render_dictionary(config, source)
    if args.out is None:
        print(text, end="")
    else:
        Path(args.out).write_text(text)
        print(f"feature dictionary: {args.out}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "dictionary",
        help="every feature column's name pattern, meaning, unit and window",
        description="The feature dictionary of the configuration in effect (windows, catalog), as Markdown.",
    )
    parser.add_argument("--out", help="write it to this file instead of stdout")
    parser.add_argument(
        "--builtin", action="store_true", help="the built-in configuration's (what features/dictionary.md holds)"
    )
    parser.set_defaults(func=run)
