"""What ``import statemachine`` loads: the core, and none of the optional parts until used."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import statemachine
import statemachine.persist
from statemachine._lazy import by_module

# Modules a user of the core does not need: the OpenAI-compatible client (httpx), the
# checkpoint cipher (cryptography), PostgreSQL, llama.cpp, the diagram and the worker.
NOT_AT_IMPORT = (
    "httpx",
    "cryptography",
    "psycopg",
    "psycopg_pool",
    "llama_cpp",
    "anthropic",
    "transitions",
    "statemachine.persist._crypto",
    "statemachine._diagram",
    "statemachine.models",
    "statemachine.models._anthropic",
    "statemachine.models._llamacpp",
    "statemachine.models._openai",
    "statemachine.models._prices",
    "statemachine._patch",
    "statemachine.persist._postgres",
    "statemachine.persist._postgres_sql",
    "statemachine._worker",
    "statemachine.cli",
    "argparse",
    "structlog",
    "asyncio",
    "importlib.metadata",
    # Loaded by the first Runner (spans and metrics) or on first use, not by the import.
    "opentelemetry",
    "opentelemetry.trace",
    "opentelemetry.metrics",
    "logging",
    "shutil",
    "difflib",
    # The classes of statemachine.testing.capture() and the configuration models.
    "statemachine._capture",
    "statemachine._config",
    "statemachine.testing",
)

# What a user building a loop imports: the same modules stay unloaded.
CORE_NAMES = "from statemachine import Agent, Runner, read_tool, SQLiteCheckpointer"

LAZY = {
    "AgentConfig": "statemachine._config",
    "AgentGraph": "statemachine._diagram",
    "CheckpointCipher": "statemachine.persist._crypto",
    "AnthropicModel": "statemachine.models._anthropic",
    "LlamaCppConfig": "statemachine.models._llamacpp",
    "LlamaCppModel": "statemachine.models._llamacpp",
    "OpenAICompatibleModel": "statemachine.models._openai",
    "PatchAccepted": "statemachine._patch",
    "PatchRejected": "statemachine._patch",
    "PostgresCheckpointer": "statemachine.persist._postgres",
    "RetrySettings": "statemachine._config",
    "TokenPrices": "statemachine.models._prices",
    "Worker": "statemachine._worker",
    "agent_graph": "statemachine._diagram",
    "apply_patch": "statemachine._patch",
    "generate_key": "statemachine.persist._crypto",
}


def loaded_after(code: str) -> set[str]:
    """The names in sys.modules after running ``code`` in a fresh interpreter."""
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    return set(json.loads(done.stdout))


def test_import_loads_none_of_the_optional_parts() -> None:
    """A fresh ``import statemachine`` leaves every optional dependency and module unloaded."""
    loaded = loaded_after("import statemachine")
    assert sorted(name for name in NOT_AT_IMPORT if name in loaded) == []


def test_import_loads_only_the_package_itself() -> None:
    """Every public name is imported on first use: ``import statemachine`` alone loads the
    package's ``__init__`` and its lazy loader, and none of pydantic, attrs or anyio."""
    loaded = loaded_after("import statemachine")
    assert sorted(name for name in loaded if name.startswith("statemachine")) == [
        "statemachine",
        "statemachine._lazy",
    ]
    assert sorted({"pydantic", "attrs", "attr", "anyio"} & loaded) == []


def test_the_persist_wing_loads_only_itself() -> None:
    """``import statemachine.persist`` loads its ``__init__`` and no store, codec or chain."""
    loaded = loaded_after("import statemachine.persist")
    assert sorted(name for name in loaded if name.startswith("statemachine")) == [
        "statemachine",
        "statemachine._lazy",
        "statemachine.persist",
    ]


def test_the_persist_wing_is_an_attribute_of_the_package() -> None:
    """``statemachine.persist`` is reachable after ``import statemachine`` alone, as it was
    when the package imported the stores at its import."""
    code = """import statemachine
assert statemachine.persist.SQLiteCheckpointer is statemachine.SQLiteCheckpointer
assert "persist" in dir(statemachine)
"""
    assert "statemachine.persist._sqlite" in loaded_after(code)


def test_the_core_names_load_none_of_the_optional_parts() -> None:
    """Importing what a loop is built from leaves the same modules unloaded."""
    loaded = loaded_after(CORE_NAMES)
    assert sorted(name for name in NOT_AT_IMPORT if name in loaded) == []


# The persistence wing's modules beyond the status enum: a run without a store needs none.
STORE_MODULES = (
    "sqlite3",
    "statemachine.persist._base",
    "statemachine.persist._chain",
    "statemachine.persist._codec",
    "statemachine.persist._delta",
    "statemachine.persist._memory",
    "statemachine.persist._protocol",
    "statemachine.persist._rows",
    "statemachine.persist._sqlite",
)

A_RUN = """from statemachine import Agent, Runner
from statemachine.testing import AutoDenyGate, ScriptedModel, reply
runner = Runner(Agent(name="a"), model=ScriptedModel([reply("hi")]), gate=AutoDenyGate(){store})
result = runner.run_sync(None, "hello")
assert result.status == "done", result.status
"""


def test_a_run_without_a_store_loads_no_store_codec_or_chain() -> None:
    """A run to Done with no checkpointer loads none of the persistence wing's stores,
    codec, delta producer, chain or protocols, nor the capture of statemachine.testing."""
    loaded = loaded_after(A_RUN.format(store=""))
    assert "statemachine.persist._lifecycle" in loaded  # the run's status names
    assert sorted(set(STORE_MODULES) & loaded) == []
    assert "statemachine._capture" not in loaded


def test_a_run_with_a_store_loads_the_codec_and_the_delta() -> None:
    """The same run with a MemoryCheckpointer saves through the codec and the delta producer."""
    code = "from statemachine import MemoryCheckpointer\n" + A_RUN.format(
        store=", checkpointer=MemoryCheckpointer()"
    )
    loaded = loaded_after(code)
    assert {"statemachine.persist._codec", "statemachine.persist._delta"} <= loaded


def test_the_testing_doubles_load_their_lazy_names_on_first_use() -> None:
    """``statemachine.testing``'s store and capture are the package's objects, loaded when
    first asked for."""
    import statemachine.testing

    assert "statemachine._capture" not in loaded_after("import statemachine.testing")
    assert statemachine.testing.MemoryCheckpointer is statemachine.MemoryCheckpointer
    assert statemachine.testing.capture is sys.modules["statemachine._capture"].capture
    assert {"capture", "MemoryCheckpointer"} <= set(dir(statemachine.testing))
    with pytest.raises(AttributeError) as raised:
        statemachine.testing.NoSuchDouble  # type: ignore[attr-defined]  # noqa: B018
    assert str(raised.value) == "module 'statemachine.testing' has no attribute 'NoSuchDouble'"


def test_a_runner_loads_opentelemetry_and_logging() -> None:
    """A Runner binds the tracer and the library's logger when it is made."""
    code = f"""{CORE_NAMES}
from statemachine.testing import AutoApproveGate, ScriptedModel, reply
runner = Runner(Agent(name="a"), model=ScriptedModel([reply("hi")]), gate=AutoApproveGate())
"""
    loaded = loaded_after(code)
    assert {"opentelemetry.trace", "opentelemetry.metrics", "logging"} <= loaded


def test_the_default_fallback_counter_counts_on_the_global_meter_provider() -> None:
    """Made on first use, the default counter records on the provider set after import."""
    code = """
import asyncio
import statemachine
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from pydantic import BaseModel
from statemachine import OutputGuard, validate_with_retries
from statemachine.testing import reply

class Ticket(BaseModel, frozen=True):
    summary: str

reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

async def ask(feedback):
    return reply("not json")

result = asyncio.run(validate_with_retries(OutputGuard(Ticket), ask, attempts=2))
assert result.status == "exhausted", result.status
data = reader.get_metrics_data()
values = [
    point.value
    for resource in data.resource_metrics
    for scope in resource.scope_metrics
    for metric in scope.metrics
    if metric.name == "statemachine.validation.fallbacks"
    for point in metric.data.data_points
]
assert values == [1], values
"""
    assert "opentelemetry.sdk.metrics" in loaded_after(code)


@pytest.mark.parametrize("name", sorted(LAZY))
def test_a_lazy_name_loads_its_module_on_first_use(name: str) -> None:
    """``from statemachine import X`` imports X's module then, and only it."""
    loaded = loaded_after(f"from statemachine import {name}")
    assert LAZY[name] in loaded
    # The worker reads the checkpoint keys, so it imports the cipher's module; the HTTP
    # adapters price their usage with TokenPrices.
    needed = {
        "Worker": {"statemachine.persist._crypto"},
        "OpenAICompatibleModel": {"statemachine.models._prices"},
        "AnthropicModel": {"statemachine.models._prices"},
    }.get(name, set())
    others = {module for module in LAZY.values() if module != LAZY[name]} - needed
    assert sorted(others & loaded) == []


def test_lazy_names_are_the_objects_their_modules_define() -> None:
    """Each lazy public name is the very object of the module that defines it."""
    for name, module in LAZY.items():
        assert getattr(statemachine, name) is getattr(sys.modules[module], name), name


def test_lazy_names_are_listed_by_dir_and_all() -> None:
    """``dir(statemachine)`` and ``__all__`` show the lazy names before they are used."""
    assert set(LAZY) <= set(dir(statemachine))
    assert set(LAZY) <= set(statemachine.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    """A name the package does not have raises AttributeError with Python's own message."""
    with pytest.raises(AttributeError) as raised:
        statemachine.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
    assert str(raised.value) == "module 'statemachine' has no attribute 'NoSuchName'"
    assert getattr(statemachine, "NoSuchName", None) is None


MODELS = (
    "AnthropicModel",
    "LlamaCppConfig",
    "LlamaCppModel",
    "OpenAICompatibleModel",
    "TokenPrices",
)


def test_the_models_wing_lists_the_adapters_of_the_top_level() -> None:
    """``statemachine.models`` exports the five adapter names, the same objects as the top's."""
    import statemachine.models

    assert statemachine.models.__all__ == MODELS
    assert set(MODELS) <= set(dir(statemachine.models))
    for name in MODELS:
        assert getattr(statemachine.models, name) is getattr(statemachine, name), name


def test_importing_the_models_wing_loads_no_adapter() -> None:
    """``import statemachine.models`` alone loads neither adapter, httpx nor llama.cpp."""
    loaded = loaded_after("import statemachine.models")
    assert "statemachine.models" in loaded
    unwanted = {
        "httpx",
        "llama_cpp",
        "anthropic",
        "statemachine.models._openai",
        "statemachine.models._llamacpp",
        "statemachine.models._anthropic",
        "statemachine.models._prices",
    }
    assert sorted(unwanted & loaded) == []


def test_a_models_name_loads_only_its_module() -> None:
    """``from statemachine.models import TokenPrices`` loads the prices, and no adapter."""
    loaded = loaded_after("from statemachine.models import TokenPrices")
    assert "statemachine.models._prices" in loaded
    adapters = {"_openai", "_anthropic", "_llamacpp"}
    assert sorted({f"statemachine.models.{name}" for name in adapters} & loaded) == []


def test_the_anthropic_adapter_loads_its_sdk_only_to_send() -> None:
    """``AnthropicModel`` loads its adapter; the anthropic SDK waits for the first call."""
    loaded = loaded_after("from statemachine import AnthropicModel")
    assert "statemachine.models._anthropic" in loaded
    assert sorted({"anthropic", "llama_cpp", "httpx"} & loaded) == []


def test_an_unknown_models_name_is_an_attribute_error() -> None:
    """A name the models wing does not have raises AttributeError with Python's own message."""
    import statemachine.models

    with pytest.raises(AttributeError) as raised:
        statemachine.models.NoSuchModel  # type: ignore[attr-defined]  # noqa: B018
    assert str(raised.value) == "module 'statemachine.models' has no attribute 'NoSuchModel'"


def _typing_imports(package: ModuleType) -> dict[str, str]:
    """Name to module of the ``if TYPE_CHECKING:`` imports of ``package``'s ``__init__``
    (modules relative to the package, as its ``_LAZY`` names them)."""
    assert package.__file__ is not None
    tree = ast.parse(Path(package.__file__).read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for inner in node.body:
                assert isinstance(inner, ast.ImportFrom), ast.unparse(inner)
                for alias in inner.names:
                    found[alias.name] = "." * inner.level + (inner.module or "")
    return found


@pytest.mark.parametrize("package", [statemachine, statemachine.persist], ids=lambda p: p.__name__)
def test_the_checkers_and_the_loader_read_the_same_names(package: ModuleType) -> None:
    """The imports the type checkers read and the map the loader reads name the same
    objects from the same modules, and export exactly ``__all__``."""
    lazy: dict[str, str] = package._LAZY
    assert _typing_imports(package) == lazy
    assert set(lazy) == set(package.__all__)


@pytest.mark.parametrize("package", [statemachine, statemachine.persist], ids=lambda p: p.__name__)
def test_every_public_name_is_the_object_its_module_defines(package: ModuleType) -> None:
    """Each name of ``__all__``, asked for, is the very object of its module."""
    for name, module in package._LAZY.items():
        found = importlib.import_module(module, package.__name__)
        assert getattr(package, name) is getattr(found, name), name


def test_the_stores_are_the_same_objects_in_both_places() -> None:
    """A name ``statemachine.persist`` shares with ``statemachine`` is the same object."""
    shared = set(statemachine.persist.__all__) & set(statemachine.__all__)
    assert {"SQLiteCheckpointer", "Checkpointer", "dump_phase"} <= shared
    for name in shared:
        assert getattr(statemachine.persist, name) is getattr(statemachine, name), name


def test_star_import_gives_every_public_name() -> None:
    """``from statemachine import *`` binds all of ``__all__`` (each loaded then)."""
    namespace: dict[str, object] = {}
    exec("from statemachine import *", namespace)
    assert set(statemachine.__all__) <= set(namespace)


def test_a_name_listed_twice_in_a_lazy_table_is_refused() -> None:
    """``by_module`` names the name and both modules, so the table's slip is found at import."""
    with pytest.raises(ValueError, match=r"^'Budget' is listed under '\._budget' and '\._phases'$"):
        by_module({"._budget": ("Budget",), "._phases": ("Agent", "Budget")})
    assert by_module({"._budget": ("Budget", "Spend")}) == {
        "Budget": "._budget",
        "Spend": "._budget",
    }


def test_an_unknown_persist_name_is_an_attribute_error() -> None:
    """A name the persist wing does not have raises AttributeError with Python's own message."""
    with pytest.raises(AttributeError) as raised:
        statemachine.persist.NoSuchStore  # type: ignore[attr-defined]  # noqa: B018
    assert str(raised.value) == "module 'statemachine.persist' has no attribute 'NoSuchStore'"
