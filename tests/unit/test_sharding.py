"""Shards of the namespaces (barge/sharding.py): every shard computes the same owner for a namespace, each
namespace has exactly one, the spread is even enough; the configuration refuses what cannot work (a SQLite
ledger shared by processes, a bad `i/N`); each shard has its own finalizer and its own Kopf peering."""

from __future__ import annotations

from collections import Counter

import pytest

from barge import sharding
from barge.config import OperatorConfig
from barge.operator.handlers import FINALIZER, _other_finalizers, finalizer
from barge.operator.main import peering_name

PG = "postgresql://barge@127.0.0.1:5432/barge"


def test_parse_takes_i_of_n_and_refuses_the_rest() -> None:
    assert sharding.parse("") == sharding.Shard(0, 1)
    assert sharding.parse(" 2/5 ") == sharding.Shard(2, 5)
    assert str(sharding.parse("2/5")) == "2/5"
    for bad in ("5/5", "-1/3", "1", "a/3", "1/0", "1/3/4"):
        with pytest.raises(ValueError, match="BARGE_SHARD must be i/N"):
            sharding.parse(bad)


def test_every_namespace_has_exactly_one_owner_and_the_spread_is_even() -> None:
    shards = [sharding.Shard(i, 5) for i in range(5)]
    names = [f"team-{n}" for n in range(5000)]
    owners = Counter()
    for name in names:
        mine = [s.index for s in shards if s.owns(name)]
        assert len(mine) == 1, (name, mine)
        assert mine[0] == sharding.owner(name, 5)  # the same answer from every shard
        owners[mine[0]] += 1
    assert set(owners) == set(range(5))
    assert max(owners.values()) < 1.15 * 1000, owners
    assert min(owners.values()) > 0.85 * 1000, owners


def test_cluster_scoped_objects_and_a_single_shard() -> None:
    assert sharding.Shard(0, 3).owns(None)
    assert not sharding.Shard(1, 3).owns(None)
    one = sharding.Shard()
    assert not one.sharded
    assert one.first
    assert one.owns("anything")
    assert one.owns(None)


def test_a_sharded_operator_needs_the_postgresql_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BARGE_SHARD", "1/3")
    with pytest.raises(ValueError, match="share one PostgreSQL ledger"):
        OperatorConfig.from_env(ledger_url="sqlite:////tmp/ledger.db")
    config = OperatorConfig.from_env(ledger_url=PG)
    assert config.shard == sharding.Shard(1, 3)
    monkeypatch.setenv("BARGE_SHARD", "3/3")
    with pytest.raises(ValueError, match="BARGE_SHARD"):
        OperatorConfig.from_env(ledger_url=PG)


def test_each_shard_has_its_finalizer_and_releases_the_others() -> None:
    first, third = sharding.Shard(0, 3), sharding.Shard(2, 3)
    assert finalizer(first) == FINALIZER  # a single operator's name: an upgrade to shards needs nothing
    assert finalizer(third) == f"{FINALIZER}-2"
    present = [FINALIZER, f"{FINALIZER}-2", f"{FINALIZER}-1", "kubernetes.io/pvc-protection", "barge.devx"]
    assert _other_finalizers(third, present) == [FINALIZER, f"{FINALIZER}-1"]
    assert _other_finalizers(first, present) == [f"{FINALIZER}-2", f"{FINALIZER}-1"]


def test_each_shard_is_its_own_peering(monkeypatch: pytest.MonkeyPatch) -> None:
    assert peering_name(OperatorConfig.from_env(peering="barge")) == "barge"
    assert peering_name(OperatorConfig.from_env()) is None
    monkeypatch.setenv("BARGE_SHARD", "0/2")
    assert peering_name(OperatorConfig.from_env(peering="barge", ledger_url=PG)) == "barge"
    monkeypatch.setenv("BARGE_SHARD", "1/2")
    assert peering_name(OperatorConfig.from_env(peering="barge", ledger_url=PG)) == "barge-shard-1"
    assert peering_name(OperatorConfig.from_env(ledger_url=PG)) is None
