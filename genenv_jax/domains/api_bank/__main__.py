"""`python -m genenv_jax.domains.api_bank --data_dir DIR`: the gold-call replay figures of a download."""

from __future__ import annotations

import sys

from genenv_jax.core.errors import ArgumentParser, check_input_directory, command
from genenv_jax.domains.api_bank.calls import CALL_FORMATS
from genenv_jax.domains.api_bank.correctness import SCORINGS
from genenv_jax.domains.api_bank.domain import APIBankDomain
from genenv_jax.domains.api_bank.replay import replay_gold


PROGRAM = "python -m genenv_jax.domains.api_bank"


@command(PROGRAM)
def main(argv=None) -> int:
    p = ArgumentParser(prog=PROGRAM, description=__doc__)
    p.add_argument("--data_dir", required=True, help="the API-Bank download (official layout)")
    p.add_argument("--call_format", choices=CALL_FORMATS + ("both",), default="both")
    p.add_argument("--split", default="test")
    p.add_argument("--show_misses", action="store_true", help="list every missed call")
    p.add_argument("--scoring", choices=SCORINGS + ("both",), default="both")
    p.add_argument("--no_replay_history", action="store_true",
                   help="API-Bank's own protocol (official scoring's default): score each call on a fresh state "
                        "without replaying earlier calls")
    args = p.parse_args(argv)
    check_input_directory(args.data_dir, "--data_dir", "python -m genenv_jax.data.download api_bank --dest DIR")
    formats = CALL_FORMATS if args.call_format == "both" else (args.call_format,)
    scorings = SCORINGS if args.scoring == "both" else (args.scoring,)
    for scoring in scorings:
        for call_format in formats:
            figures = replay_gold(APIBankDomain(data_dir=args.data_dir, call_format=call_format, scoring=scoring,
                                                replay_history=False if args.no_replay_history else None), args.split)
            print("\n".join(figures.lines()))
            if args.show_misses:
                for category, misses in figures.misses.items():
                    for task_id, api, reason in misses:
                        print(f"    {category} {task_id} {api} {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
