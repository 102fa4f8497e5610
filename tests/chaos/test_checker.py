"""The history checker on hand-made histories: every category must be detectable."""

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import pytest

from tests.chaos.checker import History, Incident, Verdict, check, writer_owner
from tests.chaos.ledger import AuditRow, FinalInstance, LedgerRow, StoredHistory
from tests.chaos.workflows import expected_result

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LEASE = 2.0
TICK = 0.2


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def final(
    instance_id: UUID, n: int = 1, *, status: str = "completed", **kw: object
) -> FinalInstance:
    values: dict[str, object] = {
        "instance_id": instance_id,
        "name": "w3",
        "status": status,
        "params": {"n": n},
        "result": expected_result({"n": n}) if status == "completed" else None,
        "last_error": None,
        "terminal_events": 1 if status in ("completed", "failed", "cancelled") else 0,
        "checkpoint_events": 2,
    }
    values.update(kw)
    return FinalInstance(**values)  # type: ignore[arg-type]


def audit(
    instance_id: UUID,
    old: str,
    new: str,
    *,
    writer: str,
    old_owner: str | None,
    new_owner: str | None,
    when: float,
    old_expires: float | None = None,
) -> AuditRow:
    return AuditRow(
        instance_id=instance_id,
        old_status=old,
        new_status=new,
        old_owner=old_owner,
        new_owner=new_owner,
        old_epoch=1,
        new_epoch=1,
        old_lease_expires_at=None if old_expires is None else at(old_expires),
        new_lease_expires_at=None,
        recoveries=0,
        last_error=None,
        application_name=writer,
        timeouts="30s/2s/1min",
        at=at(when),
    )


def run(instance_id: UUID, step: str, owner: str, when: float) -> LedgerRow:
    return LedgerRow(instance_id=instance_id, step=step, attempt=1, owner_id=owner, at=at(when))


def clean_lifecycle(instance_id: UUID, owner: str = "a") -> tuple[list[AuditRow], list[LedgerRow]]:
    """Claimed by `owner` at 0 s, two checkpoints, completed at 1 s."""
    writer = f"laneway-worker-{owner}"
    rows = [
        audit(
            instance_id,
            "pending",
            "running",
            writer=writer,
            old_owner=None,
            new_owner=owner,
            when=0,
        ),
        audit(
            instance_id,
            "running",
            "running",
            writer=writer,
            old_owner=owner,
            new_owner=owner,
            when=0.3,
        ),
        audit(
            instance_id,
            "running",
            "running",
            writer=writer,
            old_owner=owner,
            new_owner=owner,
            when=0.6,
        ),
        audit(
            instance_id,
            "running",
            "completed",
            writer=writer,
            old_owner=owner,
            new_owner=None,
            when=1,
        ),
    ]
    ledger = [
        run(instance_id, s, owner, w) for s, w in (("one", 0.1), ("two", 0.4), ("three", 0.7))
    ]
    return rows, ledger


def history(
    instances: Sequence[FinalInstance],
    audit_rows: Sequence[AuditRow] = (),
    ledger: Sequence[LedgerRow] = (),
    *,
    enqueued: dict[UUID, object] | None = None,
    incidents: Sequence[Incident] = (),
    uncertain: frozenset[UUID] = frozenset(),
    outages: Sequence[tuple[datetime, datetime]] = (),
) -> History:
    return History(
        enqueued=enqueued if enqueued is not None else {i.instance_id: i.params for i in instances},
        uncertain=uncertain,
        stored=StoredHistory(
            instances={i.instance_id: i for i in instances},
            audit=list(audit_rows),
            ledger=list(ledger),
        ),
        incidents=incidents,
        outages=outages,
        lease_seconds=LEASE,
        tick_seconds=TICK,
        step_boundaries=2,
    )


def oracle(instance: FinalInstance, params: object) -> bool:
    return instance.status == "completed" and instance.result == expected_result(params)


def judge(h: History) -> Verdict:
    return check(h, oracle)


# -- the categories -------------------------------------------------------------------------------


def test_a_clean_run_is_all_ok() -> None:
    a, b = uuid4(), uuid4()
    rows_a, ledger_a = clean_lifecycle(a)
    rows_b, ledger_b = clean_lifecycle(b, "b")
    verdict = judge(history([final(a, 1), final(b, 2)], rows_a + rows_b, ledger_a + ledger_b))
    assert verdict.ok == {a, b}
    assert verdict.passed
    assert verdict.reclaim_seconds == []


def test_lost_when_an_enqueued_instance_is_not_terminal_or_missing() -> None:
    stuck, missing = uuid4(), uuid4()
    verdict = judge(
        history([final(stuck, status="running")], enqueued={stuck: {"n": 1}, missing: {"n": 2}})
    )
    assert verdict.lost == {stuck, missing}
    assert not verdict.passed


def test_paused_counts_as_settled_not_lost() -> None:
    paused = uuid4()
    verdict = judge(history([final(paused, status="paused")]))
    assert verdict.lost == set()
    assert verdict.wrong_result == {paused}  # this oracle wants completed


def test_unexpected_when_stored_but_never_enqueued_and_recovered_when_uncertain() -> None:
    stray, unsure = uuid4(), uuid4()
    verdict = judge(
        history([final(stray), final(unsure, 2)], enqueued={}, uncertain=frozenset({unsure}))
    )
    assert verdict.unexpected == {stray}
    assert verdict.recovered == {unsure}
    assert verdict.ok == {unsure}


def test_double_terminal_by_events_or_by_audit_moves() -> None:
    two_events, two_moves = uuid4(), uuid4()
    rows, _ = clean_lifecycle(two_moves)
    rows.append(
        audit(
            two_moves,
            "completed",
            "pending",
            writer="laneway-worker-a",
            old_owner=None,
            new_owner=None,
            when=2,
        )
    )
    rows.append(
        audit(
            two_moves,
            "pending",
            "failed",
            writer="laneway-worker-a",
            old_owner=None,
            new_owner=None,
            when=3,
        )
    )
    verdict = judge(history([final(two_events, terminal_events=2), final(two_moves, 2)], rows))
    assert verdict.double_terminal == {two_events, two_moves}


def test_stale_write_when_a_worker_updates_a_row_another_owner_holds() -> None:
    instance = uuid4()
    rows, ledger = clean_lifecycle(instance, "b")
    zombie = audit(
        instance,
        "running",
        "running",
        writer="laneway-worker-a",
        old_owner="b",
        new_owner="b",
        when=0.5,
    )
    verdict = judge(history([final(instance)], [*rows, zombie], ledger))
    assert verdict.stale_writes == [zombie]
    assert verdict.stale_written == {instance}
    assert not verdict.passed


def test_claims_recoveries_and_api_verbs_are_not_stale() -> None:
    recovered, cancelled = uuid4(), uuid4()
    rows = [
        audit(
            recovered,
            "pending",
            "running",
            writer="laneway-worker-a",
            old_owner=None,
            new_owner="a",
            when=0,
        ),
        # a's lease (renewed at 0 s, expiring at 2 s) is recovered by b at 2.3 s
        audit(
            recovered,
            "running",
            "pending",
            writer="laneway-worker-b",
            old_owner="a",
            new_owner=None,
            when=2.3,
            old_expires=2,
        ),
        audit(
            recovered,
            "pending",
            "running",
            writer="laneway-worker-b",
            old_owner=None,
            new_owner="b",
            when=2.4,
        ),
        audit(
            recovered,
            "running",
            "completed",
            writer="laneway-worker-b",
            old_owner="b",
            new_owner=None,
            when=3,
        ),
        audit(
            cancelled,
            "running",
            "cancelled",
            writer="laneway-serve-c",
            old_owner="a",
            new_owner=None,
            when=1,
        ),
    ]
    ledger = [run(recovered, "one", "a", 0.1), run(recovered, "one", "b", 2.5)]
    ledger += [run(recovered, s, "b", 2.6) for s in ("two", "three")]
    verdict = judge(
        history(
            [final(recovered), final(cancelled, 2, status="cancelled")],
            rows,
            ledger,
            incidents=[Incident(owner_id="a", kind="kill", at=at(1))],
        )
    )
    assert verdict.stale_writes == []
    assert verdict.unexplained_duplicates == []
    assert verdict.duplicate_runs == 1
    assert verdict.reclaim_seconds == [pytest.approx(2.3)]
    assert verdict.wrong_result == {cancelled}


def test_a_recovery_before_the_lease_ran_out_is_stale_and_premature() -> None:
    instance = uuid4()
    early = _recovery(instance, 1.5)  # renewed at 0 s, taken at 1.5 s: the lease is 2 s
    verdict = judge(history([final(instance)], [early]))
    assert verdict.stale_writes == [early]
    [(premature_id, seconds)] = verdict.premature
    assert premature_id == instance
    assert seconds == pytest.approx(1.5)
    assert not verdict.passed


def test_unexplained_duplicate_when_no_fault_touched_an_owner_that_ran_the_step() -> None:
    instance = uuid4()
    rows, ledger = clean_lifecycle(instance)
    ledger.append(run(instance, "two", "b", 0.5))
    verdict = judge(history([final(instance)], rows, ledger))
    assert verdict.unexplained_duplicates == [(instance, "two")]
    assert verdict.duplicate_runs == 1
    assert not verdict.passed


def test_a_duplicate_is_explained_by_a_kill_or_a_lost_lease_of_one_of_its_runners() -> None:
    killed, leased = uuid4(), uuid4()
    rows_k, ledger_k = clean_lifecycle(killed, "b")
    ledger_k.append(run(killed, "one", "a", 0.05))
    rows_l, ledger_l = clean_lifecycle(leased, "b")
    ledger_l.append(run(leased, "one", "z", 0.05))
    rows_l.append(
        audit(
            leased,
            "running",
            "pending",
            writer="laneway-worker-b",
            old_owner="z",
            new_owner=None,
            when=0.0,
            old_expires=-1,
        )
    )
    verdict = judge(
        history(
            [final(killed), final(leased, 2)],
            rows_k + rows_l,
            ledger_k + ledger_l,
            incidents=[Incident(owner_id="a", kind="kill", at=at(0.06))],
        )
    )
    assert verdict.unexplained_duplicates == []
    assert verdict.duplicate_runs == 2


def test_two_extra_runs_need_two_faulted_runners() -> None:
    instance = uuid4()
    rows, ledger = clean_lifecycle(instance, "c")
    ledger += [run(instance, "one", "a", 0.01), run(instance, "one", "b", 0.02)]
    verdict = judge(
        history(
            [final(instance)],
            rows,
            ledger,
            incidents=[Incident(owner_id="a", kind="kill", at=at(0.015))],
        )
    )
    assert verdict.unexplained_duplicates == [(instance, "one")]


def test_wrong_result_when_the_oracle_disagrees() -> None:
    instance = uuid4()
    verdict = judge(
        history([final(instance, result={"n": 1, "steps": ["one", "two", "two", "three"]})])
    )
    assert verdict.wrong_result == {instance}
    assert verdict.ok == set()


def test_duplicate_checkpoint_when_a_step_boundary_was_recorded_twice() -> None:
    twice, paused = uuid4(), uuid4()
    verdict = judge(
        history(
            [
                final(twice, checkpoint_events=3),
                final(paused, 2, status="paused", checkpoint_events=1),
            ]
        )
    )
    assert verdict.duplicate_checkpoints == {twice}
    assert not verdict.passed


# -- reclaim latency ----------------------------------------------------------------------------


def _recovery(instance: UUID, seconds_after_renewal: float) -> AuditRow:
    # The lease was renewed at 0 s, so it expires at LEASE; recovered `seconds_after_renewal` later.
    return audit(
        instance,
        "running",
        "pending",
        writer="laneway-worker-b",
        old_owner="a",
        new_owner=None,
        when=seconds_after_renewal,
        old_expires=LEASE,
    )


@pytest.mark.parametrize(
    ("seconds", "premature", "late"),
    [(2.5, False, False), (LEASE + TICK + 2.0, False, False), (4.5, False, True)],
)
def test_reclaim_latency_is_judged_against_lease_and_lease_plus_tick_plus_2s(
    seconds: float, premature: bool, late: bool
) -> None:
    instance = uuid4()
    rows = [reaper_at_work(0.0), _recovery(instance, seconds)]
    verdict = judge(history([final(instance)], rows))
    assert verdict.reclaim_seconds == [pytest.approx(seconds)]
    assert bool(verdict.premature) is premature
    assert bool(verdict.late) is late


def reaper_at_work(when: float) -> AuditRow:
    """A claim by worker b (the recovering worker): from then on it is up and reaping."""
    return audit(
        uuid4(),
        "pending",
        "running",
        writer="laneway-worker-b",
        old_owner=None,
        new_owner="b",
        when=when,
    )


def test_a_late_reclaim_is_not_judged_while_no_worker_was_up_to_reap() -> None:
    booting, killed = uuid4(), uuid4()
    # b's first write comes after the lease expired (it was booting): nobody could reap.
    late_while_booting = history([final(booting)], [_recovery(booting, 6.0)])
    # b was up, then killed before the lease expired: nobody could reap either.
    killed_before = history(
        [final(killed)],
        [reaper_at_work(0.0), _recovery(killed, 6.0)],
        incidents=[Incident(owner_id="b", kind="kill", at=at(1.0))],
    )
    for h in (late_while_booting, killed_before):
        verdict = judge(h)
        assert verdict.late == []
        assert verdict.unjudged_late == 1


def test_a_recovery_across_a_declared_outage_is_not_judged() -> None:
    instance = uuid4()
    verdict = judge(
        history([final(instance)], [_recovery(instance, 9.0)], outages=[(at(1.0), at(6.0))])
    )
    assert verdict.reclaim_seconds == []
    assert verdict.late == []


@pytest.mark.parametrize(
    ("name", "owner"),
    [
        ("laneway-worker-w1g0", "w1g0"),
        ("laneway-serve-host:12:ab-cd", "host:12:ab-cd"),
        ("laneway-engine-x", "x"),
        ("laneway-listener", None),
        ("laneway-test-admin", None),
        ("chaos-ledger-w1g0", None),
        ("laneway", None),
    ],
)
def test_writer_owner_reads_engine_application_names_only(name: str, owner: str | None) -> None:
    assert writer_owner(name) == owner
