"""The in-process caches: bounded by entries, and the profile cache by bytes."""

from __future__ import annotations

import pytest

from service.accounting.mechanisms import parse_mechanism
from service.accounting.profiles.profile import compute_profile
from service.jobs.lru import Lru
from service.profiles.cache import MemoryProfileStore, profile_nbytes


def test_lru_drops_least_recently_used_past_max_entries() -> None:
    lru: Lru[str, int] = Lru(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # "b" is now the least recently used
    lru.put("c", 3)
    assert lru.get("b") is None
    assert (lru.get("a"), lru.get("c")) == (1, 3)


def test_lru_bounded_by_bytes_keeps_what_fits() -> None:
    lru: Lru[str, bytes] = Lru(100, max_bytes=10, weigh=len)
    lru.put("a", b"xxxx")
    lru.put("b", b"yyyy")
    assert lru.held_bytes == 8
    lru.put("c", b"zzzz")  # 12 > 10: "a" goes
    assert lru.get("a") is None
    assert lru.held_bytes == 8
    lru.put("b", b"y")  # replacing an entry re-weighs it
    assert lru.held_bytes == 5
    lru.put("huge", b"h" * 11)  # larger than the whole budget: not kept, nothing dropped
    assert lru.get("huge") is None
    assert (lru.get("b"), lru.get("c")) == (b"y", b"zzzz")


def test_lru_refuses_half_a_byte_bound() -> None:
    with pytest.raises(ValueError, match="go together"):
        Lru(4, max_bytes=10)


def _profile(noise: float):
    mech = parse_mechanism(
        {
            "type": "dp_sgd",
            "sampling_rate": 0.01,
            "noise_multiplier": noise,
            "clipping_norm": 1.0,
            "steps": 100,
            "learning_rate": 0.1,
        }
    )
    return compute_profile(mech)


def test_profile_store_is_bounded_by_the_profiles_bytes() -> None:
    one, two = _profile(1.0), _profile(1.1)
    weigh_one, weigh_two = profile_nbytes(one), profile_nbytes(two)
    assert one.pld is not None
    # the weight counts at least the PLD's two PMFs
    assert weigh_one > one.pld.remove._probs.nbytes + one.pld.add._probs.nbytes
    store = MemoryProfileStore(max_bytes=weigh_one + weigh_two)
    store.put("one", one)
    store.put("two", two)
    assert store.get("one") is one and store.get("two") is two
    store.put("three", _profile(1.2))  # over the budget: the least recently used goes
    assert store.get("one") is None
    assert store.held_bytes <= weigh_one + weigh_two
