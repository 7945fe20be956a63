"""``?wait=`` on the approval routes against a real server process: odd values are refused in one
line, and one token cannot hold more than ``max_waits_per_token`` long-polls at once (each one is
re-read on every approval change, so a client opening hundreds would make every vote cost
hundreds of reads): the next long-poll is a 429 in one line, a new request past the limit is
stored and answered at once (pending), another token is not affected, and a slot is free again
once a wait answers."""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Any

import httpx
import pytest
from agent_saga_server.settings import ServerSettings
from plane_testkit import RunningServer

LIMIT = ServerSettings().max_waits_per_token


def request_body(request_id: str, amount: int) -> dict[str, Any]:
    return {
        "id": request_id, "saga": f"saga-{amount}", "ordinal": 1, "tool": "bank.wire",
        "semantics": "irreversible", "digest": f"{amount:064x}", "args": {"amount": amount},
        "rule": "irreversible", "reason": "r", "approvers": ["*"], "quorum": 1,
        "expires_at": time.time() + 600,
    }  # fmt: skip


@pytest.mark.parametrize("wait", ["-1", "nan", "inf", "1e999", "31", "soon", "", "0x10"])
def test_odd_wait_values_are_refused_in_one_line(server: RunningServer, wait: str) -> None:
    token = server.token("agent", "odd-waiter", origin="host-odd")
    request_id = f"apr-{secrets.token_hex(8)}"
    with server.client(token) as client:
        made = client.post("/v1/approvals", params={"wait": wait}, json=request_body(request_id, 7))
        assert made.status_code == 400, made.text
        assert "\n" not in made.json()["detail"]
        assert "wait" in made.json()["detail"]
        assert client.get(f"/v1/approvals/{request_id}").status_code == 404  # nothing written


def test_one_token_holds_a_bounded_number_of_long_polls(server: RunningServer) -> None:
    agent = server.token("agent", "greedy", origin="host-greedy")
    other = server.token("agent", "modest", origin="host-modest")
    approver = server.token("approver", "ann-limits")
    target, second, third = (f"apr-{secrets.token_hex(8)}" for _ in range(3))

    async def scenario() -> tuple[list[int], httpx.Response, httpx.Response, int]:
        limits = httpx.Limits(max_connections=LIMIT + 8)
        headers = {"Authorization": f"Bearer {agent}"}
        async with httpx.AsyncClient(
            base_url=server.url, headers=headers, limits=limits, timeout=30, trust_env=False
        ) as client:
            made = await client.post("/v1/approvals", json=request_body(target, 1))
            assert made.status_code == 201, made.text
            waits = [
                asyncio.create_task(client.get(f"/v1/approvals/{target}", params={"wait": 20}))
                for _ in range(LIMIT)
            ]
            deadline = time.monotonic() + 20
            while True:  # until the server holds every wait: a short probe is then refused
                refused = await client.get(f"/v1/approvals/{target}", params={"wait": 0.05})
                if refused.status_code == 429 or time.monotonic() > deadline:
                    break
            listed = await client.get("/v1/approvals", params={"wait": 5, "status": "denied"})
            started = time.monotonic()
            posted = await client.post(
                "/v1/approvals",
                params={"wait": 5},
                json=request_body(second, 2),
            )
            assert time.monotonic() - started < 4  # answered without waiting
            assert (posted.status_code, posted.json()["status"]) == (201, "pending")
            assert listed.status_code == 429, listed.text
            other_headers = {"Authorization": f"Bearer {other}"}
            async with httpx.AsyncClient(
                base_url=server.url, headers=other_headers, timeout=30, trust_env=False
            ) as modest:
                allowed = await modest.post(
                    "/v1/approvals",
                    params={"wait": 0.2},
                    json=request_body(third, 3),
                )
            vote_headers = {"Authorization": f"Bearer {approver}"}
            async with httpx.AsyncClient(
                base_url=server.url, headers=vote_headers, timeout=30, trust_env=False
            ) as voter:
                voted = await voter.post(
                    f"/v1/approvals/{target}/votes", json={"decision": "approve"}
                )
                assert voted.status_code == 200, voted.text
                for extra in (second, third):  # the session's server is shared: none left pending
                    denied = await voter.post(
                        f"/v1/approvals/{extra}/votes", json={"decision": "deny"}
                    )
                    assert denied.status_code == 200, denied.text
            answered = [w.status_code for w in await asyncio.gather(*waits)]
            again = await client.get(f"/v1/approvals/{target}", params={"wait": 1})
            return answered, refused, allowed, again.status_code

    answered, refused, allowed, again = asyncio.run(scenario())
    assert answered == [200] * LIMIT
    assert refused.status_code == 429, refused.text
    assert refused.json()["detail"] == (
        f"{LIMIT} long-polls are already waiting with this token (at most {LIMIT}); "
        "retry once one of them has answered"
    )
    assert allowed.status_code == 201, allowed.text
    assert again == 200
