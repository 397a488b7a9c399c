"""`ibias simulate`: serve the provider simulator on loopback (tests, benchmarks, the demo).

Its help names the three protocols and their paths (the routes of runner/simulator/server.py and
the batch services beside it), and points to `ibias run CONFIG --rehearse`, which runs a
config's own models against an in-process simulator with no editing of `base_url`s.
"""

from __future__ import annotations

import argparse
import asyncio

from ibias.runner.commands import EXIT_OK, fail
from ibias.runner.commands.options import non_negative_float, port, positive_int, probability

DESCRIPTION = """\
Serve ibias's provider simulator on 127.0.0.1: simulated replies (carrying the
biases its profile plants), rate limits, faults and latency, on three protocols
at once, each under its own paths:

  OpenAI-compatible  base_url http://127.0.0.1:PORT/v1
                     POST /v1/chat/completions
                     batch: /v1/files, /v1/batches
  Anthropic          base_url http://127.0.0.1:PORT/v1
                     POST /v1/messages
                     batch: /v1/messages/batches
  Gemini             base_url http://127.0.0.1:PORT/v1beta
                     POST /v1beta/models/MODEL:generateContent
                     batch: /v1beta/models/MODEL:batchGenerateContent,
                     /v1beta/batches, /upload/v1beta/files

GET /v1/models lists the models served, GET /stats counts what was served. Any
API key is accepted. Every reply reports its model as MODEL-sim-YYYY-MM: that
is how `ibias analyze` knows these replies are simulated and marks them so."""

EPILOG = """\
To rehearse a config before paying for it you need not start this server:
`ibias run CONFIG --rehearse` runs the config's own models, protocols, limits
and options against an in-process simulator, with no keys and no network, into
a rehearsal store of its own; `ibias analyze --config CONFIG --rehearse` then
reports it, every model marked "rehearsal: simulated replies"."""


def add_arguments(sim: argparse.ArgumentParser) -> None:
    sim.description = DESCRIPTION
    sim.epilog = EPILOG
    sim.formatter_class = argparse.RawDescriptionHelpFormatter
    sim.add_argument(
        "--port", type=port, default=8000, help="loopback port, 0 for any free one (default: 8000)"
    )
    sim.add_argument(
        "--seed", type=int, default=0, help="seed of the simulated answers (default: 0)"
    )
    sim.add_argument(
        "--rpm", type=positive_int, help="requests per minute before a 429 (default: no limit)"
    )
    sim.add_argument(
        "--tpm", type=positive_int, help="tokens per minute before a 429 (default: no limit)"
    )
    sim.add_argument(
        "--latency-ms",
        type=non_negative_float,
        default=0.0,
        help="added latency of each reply in milliseconds (default: 0)",
    )
    sim.add_argument(
        "--fault-rate",
        type=probability,
        default=0.0,
        help="probability of a simulated fault per request, over all fault kinds (default: 0)",
    )
    sim.add_argument(
        "--hide-limits",
        action="store_true",
        help="enforce --rpm/--tpm but announce them nowhere (default: announced in headers)",
    )
    sim.add_argument(
        "--profile",
        metavar="FILE",
        help="a TOML simulator profile; replaces the options above (default: none)",
    )


def handle(args: argparse.Namespace) -> int:
    from ibias.runner.simulator import serve_forever
    from ibias.runner.simulator.profile import SimProfile, load_profile

    if args.profile:
        profile = load_profile(args.profile)
    else:
        profile = SimProfile.from_args(
            seed=args.seed,
            rpm=args.rpm,
            tpm=args.tpm,
            latency_ms=args.latency_ms,
            fault_rate=args.fault_rate,
            hide_limits=args.hide_limits,
        )

    def ready(url: str) -> None:
        print(f"simulator listening on {url}", flush=True)

    try:
        asyncio.run(serve_forever(profile, "127.0.0.1", args.port, on_ready=ready))
    except OSError as exc:
        return fail(f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror}")
    return EXIT_OK
