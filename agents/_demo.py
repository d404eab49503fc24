"""What the demos share: output flags (``--trace`` prints every span, ``--log`` every
transition) and the wording of counts and money.

``python -m agents.travel``, ``agents.support`` and ``agents.research`` all take the flags.
"""

from __future__ import annotations

import argparse
import logging
import sys
from decimal import Decimal

from statemachine import Spend, configure_logging, money_difference, money_sum


def count(number: int, noun: str) -> str:
    """``number`` and ``noun``, plural unless the number is 1: ``1 tool call``, ``2 tool calls``."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def dollars(amount: Decimal) -> str:
    """``amount`` in dollars, exactly, with at least two decimal places.

    ``$800.00``, ``$0.00``; an amount with more places (a model's sub-cent cost, or a
    total that holds one) keeps them all: ``$0.0030``, ``$800.0030``. Never rounded.
    """
    exponent = amount.as_tuple().exponent
    if amount == 0 or (isinstance(exponent, int) and exponent >= -2):
        return f"${amount:.2f}"  # only adds zeros: the amount has at most two places
    return f"${amount:f}"


def spent_line(spend: Spend, tools: list[Decimal]) -> str:
    """What a run spent: its tool calls, and its cost split into the tools' and the model's.

    A run's cost adds each tool call's price (``cost=`` on the tool; in the demos, what
    the service charged: ``tools``) and each model call's reported cost. ``Spend`` keeps
    only the sum, so the model's part is the rest.
    """
    tool_cost = money_sum(*tools)
    model_cost = money_difference(spend.cost, tool_cost)
    return (
        f"{count(spend.tool_calls, 'tool call')}, {dollars(spend.cost)} "
        f"(tools {dollars(tool_cost)}, model {dollars(model_cost)})"
    )


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``--trace`` and ``--log`` to a demo's command line."""
    parser.add_argument(
        "--trace",
        action="store_true",
        help="print every span (one per run, one per transition) with the console exporter",
    )
    parser.add_argument(
        "--log", action="store_true", help="print one readable log line per transition"
    )


def apply_output_flags(args: argparse.Namespace) -> bool:
    """Set up the output ``--trace`` and ``--log`` ask for; whether any is printed mid-run.

    Without ``--log``, readable log lines are still printed for warnings and errors.
    """
    configure_logging(json=False, level=logging.INFO if args.log else logging.WARNING)
    if args.trace:
        print_spans()
    return bool(args.trace or args.log)


def print_spans() -> None:
    """Install the OpenTelemetry SDK with the console exporter: every span is printed."""
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError as error:
        sys.exit(
            f"--trace needs opentelemetry-sdk, which is not installed ({error}); "
            "install it: pip install opentelemetry-sdk"
        )
    provider = TracerProvider()
    # Simple (not batched): each span is printed as it ends, in the order of the run.
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)
