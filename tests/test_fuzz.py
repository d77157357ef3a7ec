"""Property-based fuzzing of every outside input, as Faucet fuzzes
its configuration and packets: parameter sets, frames, channel messages,
inventories and controller configurations. Any input is accepted or refused
with the module's own one-line error, never another exception, and a
refused set changes nothing in the kernel.

`scripts/test.sh` runs pytest with ``--hypothesis-show-statistics``, so
CI's log shows how many examples each property ran.
"""

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otcp.agent.core import Agent
from otcp.agent.routes import ApplyError
from otcp.controller import config
from otcp.planning import inventory
from otcp.wire import framing, messages, paramset, session
from otcp.wire.framing import ProtocolError
from otcp.wire.validation import ValidationError
from support.agents import REPOSITORY
from support.namespaces import Namespace
from support.routes import route

EXAMPLES = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# JSON values, biased toward the shapes the inputs have: numbers of every
# kind (NaN, infinity, booleans, huge), strings that look like addresses.
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["10.77.0.2/32", "10.77.0.2", "fe80::1%v0", "2001:db8::5/128", "10.77.0.0/15", "", "h1", "s1"]),
    st.text(max_size=20),
)
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)), max_leaves=20)

route_like = st.fixed_dictionaries(
    {"dst": st.one_of(st.sampled_from(["10.77.0.2/32", "10.77.0.3", "10.88.1.1/32", "10.77.0.2/31"]), scalars),
     "rto_min_ms": st.one_of(st.integers(min_value=-5, max_value=1100), scalars),
     "initcwnd": st.one_of(st.integers(min_value=-5, max_value=300), scalars),
     "cwnd_clamp": st.one_of(st.none(), st.integers(min_value=-5, max_value=70000), scalars),
     "quickack": st.one_of(st.booleans(), scalars)},
    optional={"advmss": st.one_of(st.none(), st.integers(min_value=-5, max_value=70000), scalars),
              "pacing_rate": st.one_of(st.none(), st.integers(min_value=-5, max_value=2**33), scalars),
              "extra": json_values})
set_like = st.fixed_dictionaries(
    {"generation": st.one_of(st.integers(min_value=-2, max_value=2**64), scalars),
     "routes": st.one_of(st.lists(route_like, max_size=5), json_values)},
    optional={"owner": json_values})


@EXAMPLES
@given(st.one_of(st.binary(max_size=300), set_like.map(lambda s: json.dumps(s).encode())))
def test_any_bytes_as_a_parameter_set_are_a_set_or_one_validation_error(body):
    try:
        checked = paramset.parse_param_set(body, where="fuzz.json")
    except ValidationError as error:
        assert "\n" not in str(error)
    else:
        assert paramset.validate_param_set(checked) == checked


patch_like = st.dictionaries(
    st.sampled_from(["dst", "rto_min_ms", "initcwnd", "cwnd_clamp", "advmss", "pacing_rate", "quickack", "x"]),
    st.one_of(st.sampled_from(["10.77.0.2/32", "10.77.0.3", "10.88.1.1/32"]), st.integers(-5, 70000), scalars),
    max_size=4)
delta_like = st.fixed_dictionaries(
    {"base": st.one_of(st.integers(min_value=0, max_value=9), scalars),
     "generation": st.one_of(st.integers(min_value=0, max_value=9), scalars),
     "added": st.one_of(st.lists(route_like, max_size=3), json_values),
     "copied": st.one_of(st.lists(st.builds(lambda patch, like: {**patch, "like": like}, patch_like,
                                            st.sampled_from(["10.77.0.2/32", "10.77.0.3", "10.99.0.0/16", "x"])),
                                  max_size=2), json_values),
     "changed": st.one_of(st.lists(patch_like, max_size=3), json_values),
     "removed": st.one_of(st.lists(st.sampled_from(["10.77.0.2/32", "10.77.0.3", "10.88.1.1/32", "h1"]),
                                   max_size=3), json_values)},
    optional={"extra": json_values, "admit": st.one_of(st.integers(-1, 70000), scalars)})
BASE = paramset.validate_param_set({"generation": 5, "routes": [
    {"dst": "10.77.0.2/32", "rto_min_ms": 14, "initcwnd": 1, "cwnd_clamp": 3, "advmss": None, "pacing_rate": None,
     "quickack": True},
    {"dst": "10.77.0.3/32", "rto_min_ms": 20, "initcwnd": 2, "cwnd_clamp": None, "advmss": 536,
     "pacing_rate": 1000, "quickack": True}], "admit": 52})


@EXAMPLES
@given(st.one_of(delta_like, json_values))
def test_any_delta_makes_a_valid_set_or_one_validation_error(delta):
    try:
        made = paramset.apply_delta(BASE, delta)
    except ValidationError as error:
        assert "\n" not in str(error)
    else:
        assert made.generation > BASE.generation and paramset.validate_param_set(made.model_dump()) == made
        # The delta between the base and what it made makes the same set again.
        assert paramset.same_parameters(paramset.apply_delta(BASE, paramset.make_delta(BASE, made)), made)


@EXAMPLES
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_any_byte_stream_is_frames_or_one_protocol_error(chunks):
    decoder = framing.FrameDecoder(limit=1024)
    peer = session.Session(b"0123456789abcdef", "ab" * 32, "cd" * 32, "controller")
    try:
        for chunk in chunks:
            for body in decoder.feed(chunk):
                messages.parse_message(peer.open(body), messages.Ack, messages.Reject, messages.Hello)
    except ProtocolError as error:
        assert "\n" not in str(error)


@EXAMPLES
@given(st.one_of(json_values, st.fixed_dictionaries(
    {"type": st.sampled_from(list(messages.SCHEMAS))}, optional={"nonce": scalars, "mac": scalars,
                                                                 "generation": scalars, "results": json_values,
                                                                 "error": scalars, "version": scalars})))
def test_any_message_is_checked_or_refused_with_one_protocol_error(message):
    try:
        messages.parse_message(message)
    except ProtocolError as error:
        assert "\n" not in str(error)


inventory_like = st.fixed_dictionaries({}, optional={
    "mss_bytes": scalars,
    "defaults": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "capacity_mbps": scalars, "buffer_bytes": scalars, "delay_us": scalars})),
    "switches": st.one_of(st.lists(st.sampled_from(["s1", "s2", 3, ""]), max_size=3), json_values),
    "hosts": st.one_of(st.dictionaries(st.sampled_from(["h1", "h2", "s1"]), st.fixed_dictionaries(
        {"ip": st.sampled_from(["10.0.0.1", "10.0.0.2", "10.0.0.999"])}), max_size=2), json_values),
    "links": st.one_of(st.lists(st.fixed_dictionaries(
        {"a": st.sampled_from(["h1", "h2", "s1", "s2", "s9"]), "b": st.sampled_from(["s1", "s2", "h2"])},
        optional={"capacity_mbps": scalars, "buffer_bytes": scalars, "delay_us": scalars}), max_size=4),
        json_values),
    "flows": st.one_of(st.lists(st.fixed_dictionaries(
        {"src": st.sampled_from(["h1", "h2"]), "dst": st.sampled_from(["h1", "h2", "h7"])},
        optional={"count": scalars}), max_size=2), json_values),
})


@EXAMPLES
@given(st.one_of(inventory_like, json_values))
def test_any_inventory_is_parsed_or_one_inventory_error(document):
    try:
        inventory.parse(document, "fuzz.yaml")
    except inventory.InventoryError as error:
        assert str(error).startswith("fuzz.yaml: ") and "\n" not in str(error)


config_like = st.fixed_dictionaries({}, optional={
    "openflow": st.one_of(json_values, st.fixed_dictionaries({}, optional={"host": scalars, "port": scalars})),
    "intervals": st.one_of(json_values, st.fixed_dictionaries({}, optional={
        "probe_s": scalars, "flow_stats_s": scalars, "recompute_s": scalars})),
    "delay_window": scalars, "log_level": scalars,
    "defaults": st.fixed_dictionaries({}, optional={"capacity_mbps": scalars, "buffer_bytes": scalars}),
    "bounds": st.fixed_dictionaries({}, optional={"mss_bytes": scalars, "initcwnd": json_values}),
})


@EXAMPLES
@given(st.one_of(config_like, json_values))
def test_any_configuration_is_loaded_or_one_config_error(document):
    try:
        config.validate(document, "fuzz.yaml")
    except config.ConfigError as error:
        assert str(error).startswith("fuzz.yaml: ") and "\n" not in str(error)


# -- against the kernel ----------------------------------------------------------------------------


@pytest.mark.root
def test_a_refused_set_changes_nothing_in_the_kernel(tmp_path):
    namespace = Namespace()
    try:
        with Agent(str(tmp_path / "state.db"), netns=namespace.name) as agent:
            agent.apply({"generation": 1, "routes": [route("10.77.0.2/32"), route("10.77.0.3/32")]}, "setup")
            _refused_changes_nothing(agent, namespace)
    finally:
        namespace.delete()


def _refused_changes_nothing(agent, namespace):
    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(set_like)
    def check(document):
        before = namespace.otcp_routes()
        try:
            agent.apply(document, "fuzz")
        except (ValidationError, ApplyError) as error:
            assert "\n" not in str(error)
            assert namespace.otcp_routes() == before

    check()


@pytest.mark.root
def test_otcp_agent_apply_exits_0_or_2_with_one_line(tmp_path):
    namespace = Namespace()
    counter = iter(range(10**6))
    try:
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.one_of(set_like.map(json.dumps), st.binary(max_size=80).map(lambda b: b.decode("latin-1"))))
        def check(text):
            path = tmp_path / f"fuzz-{next(counter)}.json"
            path.write_text(text, encoding="latin-1")
            done = subprocess.run([sys.executable, "-m", "otcp.agent.cli", "--netns", namespace.name, "apply", str(path),
                                   "--state", str(tmp_path / "state.db")], cwd=REPOSITORY, capture_output=True, text=True)
            assert done.returncode in (0, 2), done.stderr
            assert "Traceback" not in done.stderr
            if done.returncode == 2:
                assert len(done.stderr.strip().splitlines()) == 1, done.stderr

        check()
    finally:
        namespace.delete()
