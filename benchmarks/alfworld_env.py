"""ALFWorld environment throughput: episodes and steps per second through the loop's own
environment hosts (in-process, or N spawned worker processes stepped in lockstep batches, as the
episode runner drives them). No model is involved: the agent is the expert (each game's stored
walkthrough, ~4-9 steps) or a random agent (a random available command every step, until the
step cap, as an untrained agent plays).

Example (generated games, built once into --cache_dir, or read from --data_dir):
  python benchmarks/alfworld_env.py --games 32 --workers 0,1,2 --agent expert,random --max_steps 50
"""

from __future__ import annotations

import argparse
import datetime
import platform
import random
import time

from genenv_jax.domains.alfworld import ALFWorldDomain
from genenv_jax.domains.alfworld.episode import parse_action
from genenv_jax.domains.requests import Close, Reset, Step
from genenv_jax.episodes.environments import LocalEnvironments, WorkerEnvironments

REF = "genenv_jax.domains.alfworld:ALFWorldDomain"


def play(host, tasks, domain, agent: str, max_steps: int, rng: random.Random) -> dict[str, float]:
    """All episodes at once: one batch of resets, then one batch of steps per turn until all end."""
    start = time.perf_counter()
    resets = host.call([Reset(i, t) for i, t in enumerate(tasks)])
    reset_s = time.perf_counter() - start
    plans = {i: list(domain.reference_turns(t)) for i, t in enumerate(tasks)}
    commands = {i: _available(r.messages[-1]["content"]) for i, r in enumerate(resets)}
    live, steps, won = set(range(len(tasks))), 0, 0
    for turn in range(max_steps):
        if not live:
            break
        order = sorted(live)
        texts = [plans[i][turn] if agent == "expert" else f"Action: {rng.choice(commands[i] or ['look'])}"
                 for i in order]
        outcomes = host.call([Step(i, text) for i, text in zip(order, texts)])
        steps += len(order)
        for i, outcome in zip(order, outcomes):
            if outcome.done:
                live.discard(i)
                won += int(outcome.info.get("won", False))
            else:
                commands[i] = _available(outcome.observation[-1]["content"])
    host.call([Close(i) for i in range(len(tasks))])
    wall = time.perf_counter() - start
    return {"episodes": len(tasks), "steps": steps, "won": won, "reset_s": reset_s, "wall_s": wall}


def _available(text: str) -> list[str]:
    marker = "\nAvailable commands: "
    return text.split(marker, 1)[1].split(", ") if marker in text else []


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", type=int, default=32, help="train games (generated) to play, one episode each")
    p.add_argument("--workers", default="0,1,2", help="comma list; 0 = environments in this process")
    p.add_argument("--agent", default="expert,random")
    p.add_argument("--max_steps", type=int, default=50)
    p.add_argument("--cache_dir", default="/tmp/genenv_alfworld_bench")
    p.add_argument("--data_dir", default="", help="play the first --games train games of this data directory "
                   "(e.g. one built with python -m genenv_jax.domains.alfworld --build) instead")
    args = p.parse_args()
    options = ({"data_dir": args.data_dir, "max_steps": args.max_steps} if args.data_dir else
               {"games": {"train": args.games}, "cache_dir": args.cache_dir, "max_steps": args.max_steps})
    domain = ALFWorldDomain(**options)
    tasks = domain.seeds("train")[:args.games]
    assert parse_action("Action: look") == "look"
    print(f"# ALFWorld environment throughput, {len(tasks)} generated train games, {platform.node()}, "
          f"{datetime.date.today()}")
    print("| agent | workers | episodes | steps | won | reset batch s | wall s | episodes/s | steps/s | episodes/s per worker |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for agent in args.agent.split(","):
        for workers in (int(w) for w in args.workers.split(",")):
            host = LocalEnvironments(domain) if workers == 0 else WorkerEnvironments(REF, options, workers)
            try:
                if workers:
                    host.call([Close(i) for i in range(workers)])  # start the processes
                r = play(host, tasks, domain, agent, args.max_steps, random.Random(0))
            finally:
                host.close()
            per = max(workers, 1)
            print(f"| {agent} | {workers or 'in-process'} | {r['episodes']} | {r['steps']} | {r['won']} | "
                  f"{r['reset_s']:.1f} | {r['wall_s']:.1f} | {r['episodes'] / r['wall_s']:.2f} | "
                  f"{r['steps'] / r['wall_s']:.1f} | {r['episodes'] / r['wall_s'] / per:.2f} |", flush=True)


if __name__ == "__main__":
    main()
