"""schemathesis against the OpenAPI document of a real server process: no 5xx and no schema
violation over the generated cases (each operation called with a token of a scope it allows).

Every check schemathesis runs by default applies but two:

* ``ignored_auth`` sends each case twice more (without a token, with a bogus one);
  ``test_authorization`` calls every operation with every kind of token instead;
* "a schema-valid request is accepted", for a case whose body holds an integral float (``5.0``
  where an integer is expected): JSON Schema calls it an integer, this API refuses it (400), as
  it refuses every value that is not exactly of its type (``test_inputs``).

The count of cases run is printed (``-s``) and checked against a floor, so a run that silently
generated nothing fails.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.strategies import SearchStrategy
from matrix import ALLOWED, token_for
from plane_testkit import RunningServer
from schemathesis.core.result import Ok
from schemathesis.generation.case import Case
from schemathesis.specs.openapi.checks import ignored_auth, positive_data_acceptance

EXAMPLES = 10


@pytest.fixture(scope="module")
def tokens(hostile: RunningServer) -> dict[str, str]:
    assert hostile.admin is not None
    return {
        "admin": hostile.admin,
        "agent": hostile.token("agent", "fuzz-agent"),
        "approver": hostile.token("approver", "fuzz-approver"),
        "auditor": hostile.token("auditor", "fuzz-auditor"),
    }


@pytest.fixture(scope="module")
def api_schema(hostile: RunningServer) -> schemathesis.BaseSchema:
    return schemathesis.openapi.from_url(hostile.url + "/openapi.json").exclude(
        path="/v1/killswitch/stream"  # an endless stream; tested in test_fleet
    )


def test_no_server_error_and_no_schema_violation(
    api_schema: schemathesis.BaseSchema, hostile: RunningServer, tokens: dict[str, str]
) -> None:
    cases: Counter[str] = Counter()
    for result in api_schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()
        scope = token_for(operation.method.upper(), operation.path)
        headers = {} if scope is None else {"Authorization": f"Bearer {tokens[scope]}"}
        _generated_cases(operation.as_strategy(), hostile.url, headers, cases)()
    total = sum(cases.values())
    print(f"\nschemathesis: {total} cases over {len(cases)} operations")
    assert len(cases) == len(ALLOWED) - 1  # all but the stream
    assert cases["GET /v1/health"] == cases["GET /v1/ready"] == 1  # nothing to vary
    assert total >= EXAMPLES * (len(cases) - 2)


def _generated_cases(
    strategy: SearchStrategy[Case[Any]], url: str, headers: dict[str, str], cases: Counter[str]
) -> Callable[[], None]:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    @given(case=strategy)
    def call(case: Case[Any]) -> None:
        skip = [ignored_auth]  # three requests per case; test_authorization covers it
        if _integral_float(case.body):
            skip.append(positive_data_acceptance)
        response = case.call_and_validate(base_url=url, headers=headers, excluded_checks=skip)
        cases[f"{case.method.upper()} {case.path}"] += 1
        assert response.status_code < 500

    return call


def _integral_float(value: object) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, dict):
        return any(_integral_float(v) for v in value.values())
    if isinstance(value, list):
        return any(_integral_float(v) for v in value)
    return False
