"""The router core: affinity while the engine has room, least loaded otherwise, failing
engines out for a doubling backoff."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.engines.routing import Router


def router(
    engines: int = 3,
    max_inflight: int = 4,
    backoff_s: float = 1.0,
    max_backoff_s: float = 30.0,
    max_keys: int = 1000,
) -> Router:
    return Router(engines, max_inflight=max_inflight, backoff_s=backoff_s,
                  max_backoff_s=max_backoff_s, max_keys=max_keys)  # fmt: skip


def served(r: Router, keys: tuple[str, ...], now: float = 0.0) -> int:
    """Route and release at once: a call that has finished."""
    engine = r.route(keys, now)
    assert engine is not None
    r.release(engine)
    return engine


def test_a_rollout_keeps_its_engine_while_it_has_room():
    r = router()
    first = r.route(("r1", "g1"), 0.0)
    assert first is not None
    for _ in range(2):  # the others are idle, its engine is busier: affinity still wins
        assert r.route(("r1", "g1"), 0.0) == first
    assert r.loads[first] == 3
    assert r.counts.kept == 2 and r.counts.fresh == 1


def test_a_full_engine_spills_to_the_least_loaded_and_the_rollout_follows():
    r = router(max_inflight=2)
    home = r.route(("r1", "g1"), 0.0)
    assert r.route(("r1", "g1"), 0.0) == home  # now full (2 in flight)
    other = next(i for i in range(3) if i != home)
    r.loads[other] = 1
    spill = r.route(("r1", "g1"), 0.0)
    assert spill not in (home, other)  # the least loaded, not merely another one
    assert r.counts.spilled == 1
    assert r.bound("r1") == spill  # it now holds the rollout's longest prefix
    assert r.bound("g1") == home  # the group's prompt is still where it was first computed


def test_when_every_engine_is_full_the_least_loaded_wins_and_ties_keep_affinity():
    r = router(engines=2, max_inflight=1)
    home = r.route(("r1",), 0.0)
    assert home is not None
    r.loads[1 - home] = 1
    assert r.route(("r1",), 0.0) == home  # both full and tied at 1: stay with the cache
    r.loads[1 - home] = 0
    r.loads[home] = 3
    assert r.route(("r1",), 0.0) == 1 - home


def test_group_members_share_the_first_members_engine():
    r = router()
    first = r.route(("r1", "g"), 0.0)
    assert first is not None
    for member in ("r2", "r3", "r4"):
        assert r.route((member, "g"), 0.0) == first  # not the idle engines: the shared prompt
    assert r.loads[first] == 4
    assert r.route(("r5", "g"), 0.0) != first  # full now: the fifth member spills
    assert r.bound("g") == first


def test_new_rollouts_spread_round_robin_under_light_load():
    r = router()
    assert [served(r, (f"r{i}",)) for i in range(6)] == [0, 1, 2, 0, 1, 2]


def test_a_failed_engine_is_out_for_a_doubling_backoff_then_tried_again():
    r = router(backoff_s=1.0, max_backoff_s=3.0)
    home = served(r, ("r1", "g1"))
    assert r.fail(home, 10.0) == 11.0
    moved = served(r, ("r1", "g1"), 10.5)
    assert moved != home
    assert r.bound("r1") == moved and r.bound("g1") == moved  # the group's engine was out
    assert home in r.routable(11.0)
    assert r.fail(home, 11.0) == 13.0  # second strike in a row: 2 s
    assert r.fail(home, 13.0) == 16.0  # capped at 3 s
    r.succeed(home)
    assert r.fail(home, 20.0) == 21.0  # forgiven: back to 1 s


def test_engines_that_say_they_are_down_or_are_excluded_get_nothing():
    r = router()
    home = served(r, ("r1",))
    up = [i != home for i in range(3)]
    assert r.route(("r1",), 0.0, up=up) != home
    assert r.route(("r2",), 0.0, exclude=[0, 1]) == 2
    assert r.route(("r3",), 0.0, up=[False] * 3) is None
    assert r.route(("r3",), 0.0, exclude=[0, 1, 2]) is None
    assert r.counts.refused == 2


def test_a_group_of_one_keyed_twice_by_its_rollout_id_is_one_key():
    r = router(max_inflight=1)
    home = r.route(("r1", "r1"), 0.0)
    spill = r.route(("r1", "r1"), 0.0)
    assert spill != home and r.bound("r1") == spill


def test_the_key_map_forgets_the_least_recently_used_keys():
    r = router(max_keys=2)
    served(r, ("a",))
    served(r, ("b",))
    served(r, ("a",))  # a is fresh again
    served(r, ("c",))
    assert r.bound("b") is None
    assert r.bound("a") is not None and r.bound("c") is not None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["route", "release", "fail", "succeed"]),
            st.integers(0, 7),
            st.integers(0, 2),
        ),
        max_size=60,
    )
)
def test_loads_count_the_calls_in_flight_and_only_routable_engines_are_chosen(ops):
    r = router(max_inflight=2)
    now = 0.0
    in_flight: list[int] = []
    for op, rollout, engine in ops:
        now += 0.25
        if op == "route":
            chosen = r.route((f"r{rollout}", f"g{rollout // 2}"), now)
            if chosen is None:
                assert r.routable(now) == []
            else:
                assert chosen in r.routable(now)
                in_flight.append(chosen)
        elif op == "release" and in_flight:
            r.release(in_flight.pop(0))
        elif op == "fail":
            r.fail(engine, now)
        elif op == "succeed":
            r.succeed(engine)
        assert r.loads == [in_flight.count(i) for i in range(3)]
