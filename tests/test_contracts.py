"""Each contract lives in one place; these fail when a second copy appears or two drift.

- the wrapper's env names: `app/wrapper/rules.py` (the README documents each one);
- the cluster config's defaults: `InjectConfig` = the pydantic file model = the chart's values,
  and the chart's schema knows every key the webhook accepts;
- every "see the README" in a message names a section that exists.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from pathlib import Path
from typing import Any

import yaml

from app import config
from app.core.params import InjectConfig
from app.webhook.settings import ServerSettings
from app.wrapper import rules, sitecustomize

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
WRAPPER_DOC = (ROOT / "docs" / "wrapper.md").read_text()
TROUBLESHOOTING = (ROOT / "docs" / "troubleshooting.md").read_text()
ENV_NAMES = {v for k, v in vars(rules).items() if k.startswith("ENV_") and k != "ENV_PREFIX"}


def _string_literals(path: Path) -> list[str]:
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return [t.string for t in tokens if t.type == tokenize.STRING]


def test_env_names_are_spelled_only_in_the_rules_module() -> None:
    copies = []
    for path in sorted((ROOT / "app").rglob("*.py")):
        if path.name == "rules.py" and path.parent.name == "wrapper":
            continue
        for literal in _string_literals(path):
            if literal.startswith(('"""', "'''")):
                continue  # docstrings may mention them
            copies += [f"{path.relative_to(ROOT)}: {m}" for m in re.findall(r"HOSTNET_RDMA_[A-Z_]+", literal)]
    # The start-up hook runs in every Python process and must not import the rules for nothing.
    allowed = {f"app/wrapper/sitecustomize.py: {sitecustomize.ENV_HANDLED}", "app/webhook/settings.py: HOSTNET_RDMA_"}
    assert sitecustomize.ENV_HANDLED == rules.ENV_HANDLED
    assert set(copies) <= allowed, f"a second copy of an env name: {sorted(set(copies) - allowed)}"


def test_every_wrapper_env_name_is_documented_and_every_documented_one_exists() -> None:
    documented = set(
        re.findall(r"`(HOSTNET_RDMA_[A-Z_]+)`", WRAPPER_DOC + (ROOT / "docs" / "configuration.md").read_text())
    )
    settings = {"HOSTNET_RDMA_" + f.upper() for f in ServerSettings.model_fields}
    internal = {rules.ENV_HANDLED}  # set by the wrapper on its own child, not an input
    assert ENV_NAMES - internal <= documented, sorted(ENV_NAMES - internal - documented)
    assert documented <= ENV_NAMES | settings, sorted(documented - ENV_NAMES - settings)


def _values() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "charts" / "hostnet-rdma" / "values.yaml").read_text())  # type: ignore[no-any-return]


def test_config_defaults_agree_in_the_core_the_file_model_and_the_chart() -> None:
    assert config.from_dict({}) == InjectConfig()
    from_chart = config.from_dict(
        {
            **_values()["config"],
            # The chart fills these in: the image from its own, the delivery from the cluster's
            # version ("auto"; tests/test_chart.py checks both outcomes).
            "wrapper": {**_values()["config"]["wrapper"], "image": "", "imagePullPolicy": "IfNotPresent",
                        "delivery": InjectConfig().wrapper_delivery},
        }
    )  # fmt: skip
    assert _values()["config"]["wrapper"]["delivery"] == "auto"
    assert from_chart == InjectConfig(), "charts/hostnet-rdma/values.yaml config: differs from the built-in defaults"


def _aliases(model: Any) -> set[str]:
    return {f.alias or name for name, f in model.model_fields.items()}


def test_chart_schema_knows_every_config_key() -> None:
    schema = json.loads((ROOT / "charts" / "hostnet-rdma" / "values.schema.json").read_text())
    cfg = schema["properties"]["config"]["properties"]
    # excludeNamespaces is written by the chart itself (from webhook.excludeNamespaces and its
    # own namespace: one home, the webhook configuration's), never given under config:.
    assert set(cfg) == _aliases(config._File) - {"excludeNamespaces"}
    for section, model in (("inject", config._Inject), ("wrapper", config._Wrapper), ("limits", config._Limits)):
        assert set(cfg[section]["properties"]) == _aliases(model), section


def test_messages_point_at_readme_sections_that_exist() -> None:
    from app.wrapper.rules import help_topic

    # As `hostnet-rdma help` finds them: by the title's words.
    headings = {help_topic(h) for h in re.findall(r"^## (.+?)$", TROUBLESHOOTING, re.M)}
    cited = []
    for path in (ROOT / "app").rglob("*.py"):
        text = path.read_text()
        cited += re.findall(r'_see\("(.+?)"\)', text)
        cited += re.findall(r"docs/troubleshooting.md, \\?\"(.+?)\\?\"", text)
    cited = [c for c in cited if c != "{section}"]  # the helper itself
    assert len(cited) >= 4, "README references not found: the pattern is stale"
    assert {help_topic(c) for c in cited} <= headings, sorted({help_topic(c) for c in cited} - headings)


def test_one_quantity_pattern_for_the_core_the_config_file_and_the_chart() -> None:
    from app.core import quantity

    schema = json.loads((ROOT / "charts" / "hostnet-rdma" / "values.schema.json").read_text())
    chart = schema["properties"]["config"]["properties"]["inject"]["properties"]["shmSize"]["pattern"]
    assert chart == quantity.PATTERN.pattern
    field = config._Inject.model_fields["shm_size"]
    assert any(getattr(m, "pattern", None) == quantity.PATTERN.pattern for m in field.metadata)
    assert config.from_dict({"inject": {"shmSize": "1Pi"}}).shm_size == "1Pi"
