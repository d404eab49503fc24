"""The demos' shared output flags: ``--trace`` prints every span, ``--log`` every transition.

``python -m agents.travel``, ``agents.support`` and ``agents.research`` all take them.
"""

from __future__ import annotations

import argparse
import logging
import sys

from statemachine import configure_logging


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
