"""Tests for skdpp.privacy.events."""

import dataclasses

import numpy as np
import pytest

from skdpp.privacy.events import (
    ComposedEvent,
    DpEvent,
    ExponentialEvent,
    GaussianEvent,
    LaplaceEvent,
    NonPrivateEvent,
    NoOpEvent,
    PoissonSampledEvent,
    SelfComposedEvent,
)


def test_events_are_frozen():
    event = GaussianEvent(1.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.noise_multiplier = 2.0


def test_events_are_hashable_and_comparable():
    assert GaussianEvent(1.0) == GaussianEvent(1)
    assert hash(GaussianEvent(1.0)) == hash(GaussianEvent(1.0))
    assert {LaplaceEvent(2.0), LaplaceEvent(2.0)} == {LaplaceEvent(2.0)}


def test_readable_repr():
    event = SelfComposedEvent(PoissonSampledEvent(0.1, GaussianEvent(2.0)), count=3)
    assert repr(event) == (
        "SelfComposedEvent(event=PoissonSampledEvent(sampling_probability=0.1, "
        "event=GaussianEvent(noise_multiplier=2.0)), count=3)"
    )


def test_all_events_are_dpevents():
    events = [GaussianEvent(1.0), LaplaceEvent(1.0), ExponentialEvent(1.0),
              SelfComposedEvent(NoOpEvent(), 2), ComposedEvent(()),
              PoissonSampledEvent(0.5, GaussianEvent(1.0)), NoOpEvent(), NonPrivateEvent()]
    assert all(isinstance(e, DpEvent) for e in events)


def test_composed_event_converts_list_to_tuple():
    event = ComposedEvent([GaussianEvent(1.0), LaplaceEvent(2.0)])
    assert event.events == (GaussianEvent(1.0), LaplaceEvent(2.0))


def test_numpy_scalars_accepted_and_converted():
    event = GaussianEvent(np.float32(2.0))
    assert type(event.noise_multiplier) is float
    assert SelfComposedEvent(GaussianEvent(1.0), np.int64(3)).count == 3


@pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf])
def test_gaussian_rejects_bad_noise_multiplier(bad):
    with pytest.raises(ValueError, match="noise_multiplier"):
        GaussianEvent(bad)


@pytest.mark.parametrize("bad", [-0.5, np.nan, np.inf])
def test_laplace_rejects_bad_noise_multiplier(bad):
    with pytest.raises(ValueError, match="noise_multiplier"):
        LaplaceEvent(bad)


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan])
def test_exponential_rejects_bad_epsilon(bad):
    with pytest.raises(ValueError, match="epsilon"):
        ExponentialEvent(bad)


def test_exponential_accepts_inf():
    assert ExponentialEvent(np.inf).epsilon == np.inf


@pytest.mark.parametrize("bad", ["1.0", True, None])
def test_non_numeric_parameters_rejected(bad):
    with pytest.raises(TypeError, match="noise_multiplier"):
        GaussianEvent(bad)


@pytest.mark.parametrize("bad", [-0.1, 1.1, np.nan])
def test_poisson_rejects_bad_probability(bad):
    with pytest.raises(ValueError, match="sampling_probability"):
        PoissonSampledEvent(bad, GaussianEvent(1.0))


def test_self_composed_rejects_negative_count():
    with pytest.raises(ValueError, match="count"):
        SelfComposedEvent(GaussianEvent(1.0), -1)


def test_self_composed_rejects_float_count():
    with pytest.raises(TypeError, match="count"):
        SelfComposedEvent(GaussianEvent(1.0), 2.5)


def test_nested_events_must_be_dpevents():
    with pytest.raises(TypeError, match="DpEvent"):
        SelfComposedEvent("gaussian", 2)
    with pytest.raises(TypeError, match=r"events\[1\]"):
        ComposedEvent((GaussianEvent(1.0), 3.0))
    with pytest.raises(TypeError, match="DpEvent"):
        PoissonSampledEvent(0.5, None)
