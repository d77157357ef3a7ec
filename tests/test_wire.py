"""The channel protocol and parameter-set validation (agent/wire package),
without sockets or a kernel: every class of bad input is refused with a
message naming the field."""

import json

import pytest

from otcp.wire import framing, limits, messages, paramset, session
from otcp.wire.framing import ProtocolError
from otcp.wire.session import AuthenticationError
from otcp.wire.validation import ValidationError

ROUTES_ONLY = {"mode": "routes", "reason": "BPF enforcement turned off (otcp-agent run --enforce routes)"}


def route(**overrides):
    base = {"dst": "10.0.0.2/32", "rto_min_ms": 14, "initcwnd": 1, "cwnd_clamp": 3, "advmss": None, "pacing_rate": None,
            "quickack": True, "congctl": None, "ssthresh": None, "increase": None}
    base.update(overrides)
    return base


def param_set(*routes, generation=7):
    return {"generation": generation, "routes": list(routes) or [route()]}


# -- valid sets ----------------------------------------------------------------


def test_valid_set_is_normalised():
    validated = paramset.validate_param_set(
        param_set(route(dst="10.0.0.2"), route(dst="2001:DB8::5", cwnd_clamp=None, quickack=False),
                  route(dst="10.1.0.0/16", rto_min_ms=1000, initcwnd=256, cwnd_clamp=65535))
    )
    assert isinstance(validated, paramset.ParamSet)
    assert validated.model_dump() == {
        "generation": 7,
        "routes": [
            route(dst="10.0.0.2/32"),
            route(dst="2001:db8::5/128", cwnd_clamp=None, quickack=False),
            route(dst="10.1.0.0/16", rto_min_ms=1000, initcwnd=256, cwnd_clamp=65535),
        ],
        "admit": None,
    }


def test_empty_route_list_is_a_valid_set():
    assert paramset.validate_param_set({"generation": 1, "routes": []}) == paramset.ParamSet(generation=1, routes=[])


def test_a_hand_written_set_leaves_out_what_it_does_not_set():
    """cwnd_clamp, advmss and pacing_rate are optional: absent is null, "not set" (no clamp, the
    kernel's MSS, not paced); the controller still sends every key, which is the same set."""
    short = {"generation": 3, "routes": [{"dst": "10.0.0.2/32", "rto_min_ms": 14, "initcwnd": 10, "quickack": False}]}
    checked = paramset.validate_param_set(short)
    (only,) = checked.routes
    assert (only.cwnd_clamp, only.advmss, only.pacing_rate) == (None, None, None)
    sent = json.loads(framing.encode_json(checked))  # the controller's form: every key, null where not set
    assert sent["routes"][0] == {**short["routes"][0], "cwnd_clamp": None, "advmss": None, "pacing_rate": None,
                                 "congctl": None, "ssthresh": None, "increase": None}
    assert paramset.validate_param_set(sent) == checked
    assert paramset.parse_param_set(json.dumps(short).encode()) == checked
    # What is not optional is still refused when missing, naming it.
    for key in ("dst", "rto_min_ms", "initcwnd", "quickack"):
        without = {"generation": 3, "routes": [{k: v for k, v in short["routes"][0].items() if k != key}]}
        with pytest.raises(ValidationError, match=rf"^routes\[0\]\.{key}: missing$"):
            paramset.validate_param_set(without)


def test_long_path_fields_are_checked_like_the_others():
    """congctl is a kernel congestion control's name, ssthresh whole segments in 2..2^20 - 1,
    increase whole segments per round trip in 1..255; each may be null."""
    checked = paramset.validate_param_set(param_set(route(congctl="otcp_scalable", ssthresh=1035, increase=3)))
    assert (checked.routes[0].congctl, checked.routes[0].ssthresh, checked.routes[0].increase) == \
        ("otcp_scalable", 1035, 3)
    paramset.validate_param_set(param_set(route(ssthresh=2, increase=1), route(dst="10.0.0.3", ssthresh=2**20 - 1,
                                                                               increase=255)))
    for field, value, problem in (("congctl", "Otcp", "does not match"), ("congctl", "a" * 16, "does not match"),
                                  ("congctl", "cubic;reboot", "does not match"), ("congctl", 7, "not a string"),
                                  ("ssthresh", 1, "out of range 2..1048575"), ("ssthresh", 2**20, "out of range"),
                                  ("ssthresh", 10.0, "not an integer"), ("ssthresh", True, "not an integer"),
                                  ("increase", 0, "out of range 1..255"), ("increase", 256, "out of range"),
                                  ("increase", float("nan"), "not an integer")):
        with pytest.raises(ValidationError, match=rf"^routes\[0\]\.{field}: .*{problem}"):
            paramset.validate_param_set(param_set(route(**{field: value})))


def test_a_delta_changes_long_path_fields():
    base = paramset.validate_param_set(param_set(route(), route(dst="10.9.0.0/16")))
    new = paramset.validate_param_set(param_set(route(congctl="otcp_scalable", ssthresh=900), route(dst="10.9.0.0/16"),
                                                generation=8))
    delta = paramset.make_delta(base, new)
    assert delta["changed"] == [{"dst": "10.0.0.2/32", "congctl": "otcp_scalable", "ssthresh": 900}]
    assert paramset.same_parameters(paramset.apply_delta(base, delta), new)


def test_admit_is_the_hosts_not_a_routes_and_is_checked_like_the_others():
    """admit: the most senders the host may ask at once under fan-in admission, 1..65535 or null."""
    assert paramset.validate_param_set(param_set()).admit is None
    assert paramset.validate_param_set({**param_set(), "admit": 52}).admit == 52
    assert paramset.validate_param_set({**param_set(), "admit": 65535}).admit == 65535
    for value, problem in ((0, "out of range 1..65535"), (65536, "out of range"), (52.0, "not an integer"),
                           (True, "not an integer"), (float("nan"), "not an integer"),
                           (float("inf"), "not an integer"), ("52", "not an integer")):
        with pytest.raises(ValidationError, match=rf"^admit: .*{problem}"):
            paramset.validate_param_set({**param_set(), "admit": value})
    with pytest.raises(ValidationError, match=r"^routes\[0\]\.admit: "):
        paramset.validate_param_set(param_set(route(admit=52)))


def test_a_delta_carries_admit_where_it_changed_and_the_base_holds_it_elsewhere():
    base = paramset.validate_param_set({**param_set(), "admit": 52})
    same = paramset.validate_param_set({**param_set(route(initcwnd=2), generation=8), "admit": 52})
    delta = paramset.make_delta(base, same)
    assert "admit" not in delta and paramset.apply_delta(base, delta).admit == 52
    for admit in (40, None):
        new = paramset.validate_param_set({**param_set(generation=8), "admit": admit})
        delta = paramset.make_delta(base, new)
        assert delta["admit"] == admit and delta["changed"] == []
        made = paramset.apply_delta(base, delta)
        assert made.admit == admit and paramset.same_parameters(made, new)
    with pytest.raises(ValidationError, match=r"^admit: .*out of range 1..65535"):
        paramset.apply_delta(base, {**paramset.make_delta(base, same), "admit": 0})


def test_the_same_generation_with_another_admit_is_refused():
    applied = paramset.validate_param_set({**param_set(), "admit": 52})
    with pytest.raises(ValidationError, match="^generation: 7 was already applied with different parameters"):
        paramset.check_generation(paramset.validate_param_set({**param_set(), "admit": 51}), 7, applied)
    paramset.check_generation(paramset.validate_param_set({**param_set(), "admit": 52}), 7, applied)


def test_lowest_bounds_are_accepted():
    paramset.validate_param_set(param_set(route(rto_min_ms=1, initcwnd=1, cwnd_clamp=1, pacing_rate=1)))


def test_pacing_rate_is_bytes_per_second_or_null():
    top = 2**32 - 2
    checked = paramset.validate_param_set(param_set(route(pacing_rate=2_000_000), route(dst="10.0.0.3", pacing_rate=top)))
    assert [r.pacing_rate for r in checked.routes] == [2_000_000, top]
    assert paramset.validate_param_set(param_set(route())).routes[0].pacing_rate is None
    # The wire's top is what the sock_ops program can hand SO_MAX_PACING_RATE, and what the planner caps at.
    from otcp.bpf.sockops import MAX_PACING_RATE
    from otcp.planning import formulas
    assert limits.PACING_RATE[1] == MAX_PACING_RATE == formulas.MAX_PACING_RATE_BYTES_PER_S == top


# -- every class of bad input ----------------------------------------------------


@pytest.mark.parametrize(
    "document, message",
    [
        # wrong types
        (param_set(route(initcwnd="3")), 'routes[0].initcwnd: "3" is not an integer'),
        (param_set(route(initcwnd=3.0)), "routes[0].initcwnd: 3.0 is not an integer"),
        (param_set(route(rto_min_ms=True)), "routes[0].rto_min_ms: true is not an integer"),
        (param_set(route(cwnd_clamp=[3])), "routes[0].cwnd_clamp: [3] is not an integer"),
        (param_set(route(pacing_rate=True)), "routes[0].pacing_rate: true is not an integer"),
        (param_set(route(pacing_rate=2e6)), "routes[0].pacing_rate: 2000000.0 is not an integer"),
        (param_set(route(pacing_rate="2000000")), 'routes[0].pacing_rate: "2000000" is not an integer'),
        (param_set(route(pacing_rate=float("nan"))), "routes[0].pacing_rate: NaN is not an integer"),
        (param_set(route(quickack=1)), "routes[0].quickack: 1 is not true or false"),
        (param_set(route(dst=167772162)), "routes[0].dst: 167772162 is not a string"),
        ({"generation": "7", "routes": []}, 'generation: "7" is not an integer'),
        ({"generation": 7, "routes": {}}, "routes: {} is not a list"),
        ({"generation": 7, "routes": ["10.0.0.2/32"]}, 'routes[0]: "10.0.0.2/32" is not an object'),
        ([], "a parameter set is a JSON object, not a list"),
        # out of range
        (param_set(route(), route(dst="10.0.0.3", initcwnd=300)), "routes[1].initcwnd: 300 is out of range 1..256"),
        (param_set(route(initcwnd=0)), "routes[0].initcwnd: 0 is out of range 1..256"),
        (param_set(route(rto_min_ms=0)), "routes[0].rto_min_ms: 0 is out of range 1..1000"),
        (param_set(route(rto_min_ms=1001)), "routes[0].rto_min_ms: 1001 is out of range 1..1000"),
        (param_set(route(cwnd_clamp=0)), "routes[0].cwnd_clamp: 0 is out of range 1..65535"),
        (param_set(route(cwnd_clamp=65536)), "routes[0].cwnd_clamp: 65536 is out of range 1..65535"),
        (param_set(route(pacing_rate=0)), "routes[0].pacing_rate: 0 is out of range 1..4294967294"),
        (param_set(route(pacing_rate=-1)), "routes[0].pacing_rate: -1 is out of range 1..4294967294"),
        (param_set(route(pacing_rate=2**32 - 1)), "routes[0].pacing_rate: 4294967295 is out of range 1..4294967294"),
        (param_set(generation=0), "generation: 0 is out of range 1..9223372036854775807"),
        # unknown and missing keys
        ({**param_set(), "comment": "x"}, "comment: unknown key"),
        (param_set(route(rto_min=14)), "routes[0].rto_min: unknown key"),
        ({"routes": []}, "generation: missing"),
        ({"generation": 3}, "routes: missing"),
        (param_set({k: v for k, v in route().items() if k != "quickack"}), "routes[0].quickack: missing"),
        # destinations
        (param_set(route(dst="10.0.0.1/24")), 'routes[0].dst: "10.0.0.1/24" has host bits set'),
        (param_set(route(dst="10.0.0.300")), 'routes[0].dst: "10.0.0.300" is not an IPv4 or IPv6 prefix'),
        (param_set(route(dst="h2")), 'routes[0].dst: "h2" is not an IPv4 or IPv6 prefix'),
        (param_set(route(), route(dst="10.0.0.2")), "routes[1].dst: 10.0.0.2/32 duplicates routes[0].dst"),
    ],
)
def test_bad_sets_are_refused_naming_the_field(document, message):
    with pytest.raises(ValidationError) as caught:
        paramset.validate_param_set(document)
    assert str(caught.value) == message


def test_the_generation_rule():
    """Older is refused; the applied set itself may come again, unchanged."""
    applied = paramset.validate_param_set(param_set(generation=7))
    with pytest.raises(ValidationError, match=r"^generation: 6 is not newer than the applied generation 7$"):
        paramset.check_generation(paramset.validate_param_set(param_set(generation=6)), 7, applied)
    with pytest.raises(ValidationError, match=r"^generation: 7 is not newer than the applied generation 7$"):
        paramset.check_generation(applied, 7)
    with pytest.raises(ValidationError, match="^generation: 7 was already applied with different parameters"):
        paramset.check_generation(paramset.validate_param_set({"generation": 7, "routes": []}), 7, applied)
    paramset.check_generation(applied, 7, applied)
    paramset.check_generation(paramset.validate_param_set(param_set(generation=8)), 7, applied)
    paramset.check_generation(applied, None)


def test_zone_ids_and_deep_nesting_are_refused():
    with pytest.raises(ValidationError, match=r"^routes\[0\]\.dst: .*zone id"):
        paramset.validate_param_set(param_set(route(dst="fe80::1%v0")))
    with pytest.raises(ValidationError, match="nested 1000 levels deep"):
        paramset.parse_param_set(b"[" * 1000)


def test_truncated_json_is_refused_with_its_position():
    body = json.dumps(param_set()).encode()[:-5]
    with pytest.raises(ValidationError, match=r"^set.json: invalid JSON at line 1 column \d+: "):
        paramset.parse_param_set(body, where="set.json")


def test_non_json_constants_and_bad_utf8_are_refused():
    with pytest.raises(ValidationError, match=r"^parameter set: generation: NaN is not valid JSON \(numbers must be finite\)$"):
        paramset.parse_param_set(b'{"generation": NaN, "routes": []}')
    with pytest.raises(ValidationError, match="not UTF-8"):
        paramset.parse_param_set(b'{"generation": 1, "routes": ["\xff"]}')


@pytest.mark.parametrize("number, named", [("NaN", "NaN is not valid JSON"), ("Infinity", "Infinity is not valid JSON"),
                                           ("-Infinity", "-Infinity is not valid JSON"),
                                           ("1e999", "1e999 is beyond the largest number")])
def test_nan_and_infinity_errors_name_the_field(number, named):
    body = ('{"generation": 1, "routes": [' + json.dumps(route()) + ", "
            + json.dumps(route(dst="10.0.0.3")).replace('"initcwnd": 1', f'"initcwnd": {number}') + "]}").encode()
    with pytest.raises(ValidationError) as refused:
        paramset.parse_param_set(body, where="set.json")
    assert str(refused.value) == f"set.json: routes[1].initcwnd: {named} (numbers must be finite)"


def test_a_huge_number_is_cut_in_the_error():
    with pytest.raises(ValidationError) as refused:
        paramset.parse_param_set(b'{"generation": ' + b"9" * 4000 + b', "routes": []}')
    assert str(refused.value).startswith("generation: 999") and len(str(refused.value)) < 120


@pytest.mark.parametrize("dst", ["10.0.0.1/032", "10.0.0.0/255.0.0.0", "2001:db8::/064", "10.0.0.0/08"])
def test_a_prefix_length_is_written_canonically(dst):
    with pytest.raises(ValidationError, match=r"^routes\[0\]\.dst: .*the prefix length must be a number of bits "
                                              "without leading zeros"):
        paramset.validate_param_set(param_set(route(dst=dst)))


def test_oversized_set_is_refused_before_parsing():
    body = b" " * (limits.MAX_FRAME_BYTES + 1)
    with pytest.raises(ValidationError, match="exceeds the 8388608-byte limit"):
        paramset.parse_param_set(body)


# -- framing -----------------------------------------------------------------------


def test_frames_survive_arbitrary_splits():
    messages = [b"{}", b'{"type":"x"}', b"a" * 5000]
    wire = b"".join(framing.frame(m) for m in messages)
    for step in (1, 3, 7, 4096):
        decoder = framing.FrameDecoder()
        out = []
        for i in range(0, len(wire), step):
            out.extend(decoder.feed(wire[i : i + step]))
        assert out == messages
        assert decoder.pending() == 0


def test_oversized_frame_header_is_refused_before_the_body():
    decoder = framing.FrameDecoder(limit=1024)
    with pytest.raises(ProtocolError, match="frame of 1025 bytes exceeds the 1024-byte limit"):
        decoder.feed((1025).to_bytes(4, "big"))


def test_frame_refuses_to_build_oversized_message():
    with pytest.raises(ProtocolError):
        framing.frame(b"x" * (limits.MAX_FRAME_BYTES + 1))


# -- messages ----------------------------------------------------------------------


def test_enforcement_is_reported_in_hello_and_ack_and_checked():
    ack = messages.ack_message(3, [], {"mode": "bpf", "reason": None})
    assert messages.parse_message(ack, messages.Ack).enforcement == messages.Enforcement(mode="bpf", reason=None)
    assert messages.parse_message(messages.ack_message(3, [], ROUTES_ONLY), messages.Ack).enforcement.mode == "routes"
    for bad, where in (({"mode": "ebpf", "reason": None}, "enforcement.mode"),
                       ({"mode": "routes"}, "enforcement.reason: missing"),
                       ({"mode": "bpf", "reason": None, "extra": 1}, "unknown key"),
                       ({"mode": "routes", "reason": "x" * 4097}, "enforcement.reason"),
                       ({"mode": "routes", "reason": 5}, "enforcement.reason")):
        with pytest.raises(ProtocolError, match=where):
            messages.parse_message({**ack, "enforcement": bad}, messages.Ack)
    without = {key: value for key, value in ack.items() if key != "enforcement"}
    with pytest.raises(ProtocolError, match="enforcement: missing"):
        messages.parse_message(without, messages.Ack)
    hello = {"type": "hello", "hostname": "h1", "addresses": [], "interfaces": [], "mtu": 1500, "mss_bytes": 1448,
             "congestion_controls": ["cubic"], "congestion_control": "cubic", "tcp_rto_min_us": True,
             "applied_generation": None, "agent_version": limits.VERSION, "enforcement": ROUTES_ONLY}
    assert messages.parse_message(hello, messages.Hello).hostname == "h1"
    with pytest.raises(ProtocolError, match="enforcement: missing"):
        messages.parse_message({k: v for k, v in hello.items() if k != "enforcement"}, messages.Hello)
    assert limits.VERSION == 11


def test_message_schemas_refuse_unknown_missing_and_mistyped_fields():
    good = messages.ack_message(3, [{"dst": "10.0.0.2/32", "status": "applied", "dev": "h1-eth0",
                                     "gateway": None, "table": 254}], {"mode": "bpf", "reason": None})
    assert messages.parse_message(good, messages.Ack).results[0].table == 254
    with pytest.raises(ProtocolError, match="unknown key"):
        messages.parse_message({**good, "extra": 1}, messages.Ack)
    with pytest.raises(ProtocolError, match="generation: missing"):
        messages.parse_message({"type": "ack", "results": []}, messages.Ack)
    with pytest.raises(ProtocolError, match=r"results\[0\].status"):
        messages.parse_message(messages.ack_message(3, [{"dst": "x", "status": "maybe"}], ROUTES_ONLY), messages.Ack)
    with pytest.raises(ProtocolError, match="expected params"):
        messages.parse_message(good, messages.Params)
    with pytest.raises(ProtocolError, match="expected params or resync"):
        messages.parse_message(good, messages.Params, messages.Resync)
    with pytest.raises(ProtocolError, match="expected a known message type"):
        messages.parse_message({"type": "shutdown"})
    for unhashable in ([], {}):  # found by the fuzz test: a TypeError, not a protocol error, before
        with pytest.raises(ProtocolError, match="type: expected a known message type"):
            messages.parse_message({"type": unhashable})


def test_round_trips_are_seconds_in_the_processes_and_microseconds_on_the_wire():
    trips = [messages.RoundTrip("10.0.0.2", 250e-6, 0.0012345, 9, "tcp")]
    message = messages.rtt_message(trips)
    assert message["samples"] == [{"dst": "10.0.0.2", "min_rtt_us": 250.0, "spread_us": 1234.5, "count": 9,
                                   "source": "tcp"}]
    (back,) = messages.parse_message(json.loads(framing.encode_json(message)), messages.Rtt).round_trips()
    assert back.dst == "10.0.0.2" and back.min_s == pytest.approx(250e-6) and back.spread_s == pytest.approx(1.2345e-3)
    with pytest.raises(ValueError, match="not finite"):
        messages.rtt_message([messages.RoundTrip("10.0.0.2", float("nan"), 0.0, 1, "probe")])


def test_connection_counts_cross_the_wire_and_bad_counts_are_refused():
    message = messages.connections_message([messages.SendingConnections("10.0.0.2", 8)])
    assert message == {"type": "connections", "counts": [{"dst": "10.0.0.2", "connections": 8}]}
    (back,) = messages.parse_message(json.loads(framing.encode_json(message)), messages.Connections).sending()
    assert back == messages.SendingConnections("10.0.0.2", 8)
    for bad, where in ((0, "connections"), (65536, "connections"), (True, "connections"), (2.0, "connections"),
                       (float("nan"), "connections"), ("8", "connections")):
        wrong = {"type": "connections", "counts": [{"dst": "10.0.0.2", "connections": bad}]}
        with pytest.raises(ProtocolError, match=rf"counts\[0\]\.{where}"):
            messages.parse_message(wrong, messages.Connections)
    with pytest.raises(ProtocolError, match=r"counts\[0\]\.dst"):
        messages.parse_message({"type": "connections", "counts": [{"dst": "h2", "connections": 1}]},
                               messages.Connections)


# -- authentication ----------------------------------------------------------------


SECRET = b"correct horse battery staple"


def test_challenge_response_proves_the_secret_both_ways_without_sending_it():
    controller_nonce = session.new_nonce()
    challenge = messages.parse_message(messages.challenge_message(controller_nonce), messages.Challenge)
    auth, agent_nonce = messages.auth_message(SECRET, challenge)
    assert SECRET.decode() not in json.dumps(auth)
    assert session.macs_equal(session.agent_mac(SECRET, controller_nonce, agent_nonce), auth["mac"])
    assert not session.macs_equal(session.agent_mac(b"wrong", controller_nonce, agent_nonce), auth["mac"])
    # The controller's proof is not the agent's reflected back.
    welcome = messages.welcome_message(SECRET, agent_nonce, controller_nonce)
    assert welcome["mac"] != auth["mac"]
    assert session.macs_equal(session.controller_mac(SECRET, agent_nonce, controller_nonce), welcome["mac"])


def test_malformed_nonce_is_an_authentication_error():
    with pytest.raises(AuthenticationError):
        session.agent_mac(SECRET, "00" * 32, "zz")
    with pytest.raises(AuthenticationError):
        session.agent_mac(SECRET, "00" * 32, "00" * 8)


def test_version_mismatch_is_refused():
    challenge = messages.challenge_message(session.new_nonce())
    challenge["version"] = 99
    with pytest.raises(ProtocolError, match="version 99"):
        messages.auth_message(SECRET, messages.parse_message(challenge, messages.Challenge))


def session_pair(secret_agent=SECRET, secret_controller=SECRET):
    controller_nonce, agent_nonce = session.new_nonce(), session.new_nonce()
    return (session.Session(secret_agent, controller_nonce, agent_nonce, "agent"),
            session.Session(secret_controller, controller_nonce, agent_nonce, "controller"))


def body_of(frame_bytes):
    (frame,) = framing.FrameDecoder().feed(frame_bytes)
    return frame


def test_session_messages_round_trip_in_order():
    agent, controller = session_pair()
    for generation in (1, 2, 3):
        assert controller.open(body_of(agent.seal(messages.reject_message(generation, "x"))))["generation"] == generation
    assert agent.open(body_of(controller.seal({"type": "params", "set": {}}))) == {"type": "params", "set": {}}


def test_session_refuses_replayed_reordered_forged_and_reflected_messages():
    agent, controller = session_pair()
    first, second = agent.seal({"n": 1}), agent.seal({"n": 2})
    with pytest.raises(AuthenticationError):
        controller.open(body_of(second))  # reordered
    agent, controller = session_pair()
    first = agent.seal({"n": 1})
    controller.open(body_of(first))
    with pytest.raises(AuthenticationError):
        controller.open(body_of(first))  # replayed
    agent, controller = session_pair()
    tampered = bytearray(body_of(agent.seal({"generation": 1})))
    tampered[-2] ^= 0x01
    with pytest.raises(AuthenticationError):
        controller.open(bytes(tampered))
    agent, controller = session_pair()
    with pytest.raises(AuthenticationError):
        agent.open(body_of(agent.seal({"n": 1})))  # reflected back to its sender
    agent, controller = session_pair(secret_controller=b"another secret")
    with pytest.raises(AuthenticationError):
        controller.open(body_of(agent.seal({"n": 1})))


def test_session_refuses_a_frame_too_short_for_a_mac():
    _, controller = session_pair()
    with pytest.raises(ProtocolError, match="too short"):
        controller.open(b"{}")


def test_secret_file_is_stripped_and_must_not_be_empty(tmp_path):
    path = tmp_path / "secret"
    path.write_bytes(b"  s3cret-value\n")
    assert session.read_secret(str(path)) == b"s3cret-value"
    path.write_bytes(b"\n")
    with pytest.raises(ValueError, match="empty"):
        session.read_secret(str(path))


# -- deltas (protocol 6) ------------------------------------------------------------------------


def test_a_delta_carries_added_routes_changed_fields_and_removed_destinations():
    base = paramset.validate_param_set(param_set(route(), route(dst="10.0.0.3"), route(dst="10.0.1.0/24"),
                                                 generation=7))
    new = paramset.validate_param_set(param_set(
        route(rto_min_ms=20, initcwnd=4, cwnd_clamp=None, advmss=536, pacing_rate=125_000, quickack=False),
        route(dst="10.0.1.0/24"), route(dst="10.0.2.0/24", initcwnd=2, cwnd_clamp=5, advmss=1000, pacing_rate=9),
        route(dst="10.0.1.128/25", cwnd_clamp=9), route(dst="10.0.3.0/24"), generation=9))
    delta = json.loads(framing.encode_json(paramset.make_delta(base, new)))  # as the wire carries it
    assert delta == {"base": 7, "generation": 9,
                     # nothing alike in the base, and no base route covers it: whole
                     "added": [route(dst="10.0.2.0/24", initcwnd=2, cwnd_clamp=5, advmss=1000, pacing_rate=9)],
                     # a base route with the same parameters; the base route covering it, one field changed
                     "copied": [{"dst": "10.0.1.128/25", "like": "10.0.1.0/24", "cwnd_clamp": 9},
                                {"dst": "10.0.3.0/24", "like": "10.0.0.2/32"}],
                     "changed": [{"dst": "10.0.0.2/32", "rto_min_ms": 20, "initcwnd": 4, "cwnd_clamp": None,
                                  "advmss": 536, "pacing_rate": 125_000, "quickack": False}],
                     "removed": ["10.0.0.3/32"]}
    assert paramset.same_parameters(paramset.apply_delta(base, delta), new)
    assert paramset.validate_delta(delta).model_dump(exclude_unset=True) == delta
    # An unchanged route is not in the delta; the same set makes an empty one.
    again = base.model_copy(update={"generation": 8})
    assert paramset.make_delta(base, again) == {"base": 7, "generation": 8, "added": [], "copied": [], "changed": [],
                                                "removed": []}
    assert paramset.delta_is_smaller(paramset.make_delta(base, again), base)


def test_a_delta_goes_where_its_json_is_shorter_than_the_whole_set():
    base = paramset.validate_param_set(param_set(*(route(dst=f"10.0.{i}.0/24", initcwnd=i + 1) for i in range(6)),
                                                 generation=3))
    # Every prefix replaced by one with a base route's parameters: more destinations named
    # (6 copies, 6 removals) than the set has routes, and still the shorter message.
    moved = paramset.validate_param_set(param_set(*(route(dst=f"10.1.{i}.0/24", initcwnd=i + 1) for i in range(6)),
                                                  generation=4))
    delta = paramset.make_delta(base, moved)
    assert len(delta["copied"]) == len(delta["removed"]) == 6 and not delta["added"]
    assert paramset.delta_is_smaller(delta, moved)
    # One new route in place of six: its delta (the route and six removals) is the longer.
    merged = paramset.validate_param_set(param_set(route(dst="10.0.0.0/16", initcwnd=9, rto_min_ms=30), generation=4))
    delta = paramset.make_delta(base, merged)
    assert len(delta["added"]) == 1 and len(delta["removed"]) == 6
    assert not paramset.delta_is_smaller(delta, merged)


def test_a_patch_keeps_the_fields_it_does_not_name_and_may_set_null():
    base = paramset.validate_param_set(param_set(route(cwnd_clamp=3, advmss=1000), generation=1))
    delta = {"base": 1, "generation": 2, "added": [], "copied": [], "changed": [{"dst": "10.0.0.2", "advmss": None}], "removed": []}
    assert paramset.apply_delta(base, delta).routes == [paramset.RouteParams(**route(cwnd_clamp=3, advmss=None))]


def delta(**overrides):
    document = {"base": 7, "generation": 8, "added": [], "copied": [], "changed": [{"dst": "10.0.0.2/32", "initcwnd": 2}],
                "removed": []}
    document.update(overrides)
    return document


@pytest.mark.parametrize("document, message", [
    ([], "a delta is a JSON object, not a list"),
    (delta(base=None), "base: null is not an integer"),
    (delta(generation=7), "generation: 7 is not newer than the base 7"),
    (delta(generation=True), "generation: true is not an integer"),
    ({k: v for k, v in delta().items() if k != "removed"}, "removed: missing"),
    (delta(extra=1), "extra: unknown key"),
    (delta(added=[route(initcwnd=0)], changed=[]), r"added[0].initcwnd: 0 is out of range 1..256"),
    (delta(changed=[{"dst": "10.0.0.2/32"}]), "changed[0]: changes nothing of 10.0.0.2/32"),
    (delta(changed=[{"dst": "10.0.0.2/32", "initcwnd": None}]), "changed[0].initcwnd: null is not an integer"),
    (delta(changed=[{"dst": "10.0.0.2/32", "quickack": None}]), "changed[0].quickack: null is not true or false"),
    (delta(changed=[{"dst": "10.0.0.2/32", "initcwnd": 2.0}]), "changed[0].initcwnd: 2.0 is not an integer"),
    (delta(changed=[{"dst": "10.0.0.2/32", "window": 2}]), "changed[0].window: unknown key"),
    (delta(changed=[{"initcwnd": 2}]), "changed[0].dst: missing"),
    (delta(changed=[{"dst": "10.0.0.2/32", "pacing_rate": 2**32}]), "changed[0].pacing_rate: 4294967296 is out of"),
    (delta(removed=["10.0.0.2"]), "removed[0]: 10.0.0.2/32 is already named by changed[0].dst"),
    (delta(changed=[], removed=["10.0.0.3", "10.0.0.3/32"]), "removed[1]: 10.0.0.3/32 is already named by removed[0]"),
    (delta(added=[route()], changed=[]), None),  # valid alone; refused against a base that has 10.0.0.2
    (delta(removed=["10.0.0.1/24"]), 'removed[0]: "10.0.0.1/24" has host bits set'),
    (delta(removed=["fe80::1%v0"]), 'removed[0]: "fe80::1%v0" has a zone id'),
    (delta(changed=[{"dst": "10.0.0.9/32", "initcwnd": 2}]), "changed[0].dst: 10.0.0.9/32 is not in generation 7"),
    (delta(changed=[], removed=["10.0.0.9/32"]), "removed[0]: 10.0.0.9/32 is not in generation 7"),
    (delta(base=6), "base: 6 is not the base set's generation 7"),
    (delta(copied=[{"dst": "10.0.0.5/32", "like": "10.0.0.9/32"}]), "copied[0].like: 10.0.0.9/32 is not in generation"),
    (delta(copied=[{"dst": "10.0.0.2/32", "like": "10.0.0.2/32"}], changed=[]),
     "copied[0].dst: 10.0.0.2/32 is already in generation 7"),
    (delta(copied=[{"dst": "10.0.0.5/32"}]), "copied[0].like: missing"),
    (delta(copied=[{"dst": "10.0.0.5/32", "like": "10.0.0.2/32", "initcwnd": 0}]),
     "copied[0].initcwnd: 0 is out of range 1..256"),
    (delta(copied=[{"dst": "10.0.0.2/32", "like": "10.0.0.2/32"}]),
     "changed[0].dst: 10.0.0.2/32 is already named by copied[0].dst"),
    (delta(copied=7), "copied: 7 is not a list"),
])
def test_hostile_and_malformed_deltas_are_refused_naming_the_field(document, message):
    base = paramset.validate_param_set(param_set(route(), generation=7))
    if message is None:
        with pytest.raises(ValidationError, match=r"^added\[0\].dst: 10.0.0.2/32 is already in generation 7$"):
            paramset.apply_delta(base, document)
        return
    with pytest.raises(ValidationError) as caught:
        paramset.apply_delta(base, document)
    assert str(caught.value).startswith(message), str(caught.value)


def test_a_delta_whose_result_breaks_a_set_rule_is_refused():
    base = paramset.validate_param_set({"generation": 1, "routes": []})
    with pytest.raises(ValidationError, match=r"^added\[1\].dst: 10.0.0.2/32 is already named by added\[0\].dst$"):
        paramset.apply_delta(base, {"base": 1, "generation": 2, "added": [route(), route(dst="10.0.0.2")],
                                    "copied": [], "changed": [], "removed": []})


def test_params_message_carries_a_set_or_a_delta_and_resync_is_checked():
    good = messages.delta_message(delta(), peers=["10.0.0.9"], lease_s=60, epoch=0)
    assert messages.parse_message(good, messages.Params).peers == ["10.0.0.9"]
    assert messages.parse_message(messages.params_message({"generation": 1, "routes": []}, None, lease_s=60, epoch=0)).type == "params"
    for bad, problem in [
        ({"type": "params"}, "exactly one of set and delta, not neither"),
        ({"type": "params", "set": {}, "delta": {}}, "exactly one of set and delta, not set and delta"),
        ({"type": "params", "delta": None}, "delta: null is not an object"),
        ({"type": "params", "set": []}, "set: [] is not an object"),
        (dict(good, peers="10.0.0.9"), 'peers: "10.0.0.9" is not a list'),
    ]:
        with pytest.raises(ProtocolError, match="params message: .*" + problem.replace("[", r"\[").replace("]", r"\]")):
            messages.parse_message(bad, messages.Params)
    assert messages.parse_message(messages.resync_message(8, 7), messages.Resync).applied_generation == 7
    assert messages.parse_message(messages.resync_message(8, None), messages.Resync).applied_generation is None
    for bad, problem in [
        (dict(messages.resync_message(8, 7), generation=0), "resync message: generation: 0 is out of range"),
        ({"type": "resync", "generation": 8}, "resync message: applied_generation: missing"),
    ]:
        with pytest.raises(ProtocolError, match=problem):
            messages.parse_message(bad, messages.Resync)


def test_a_set_carries_its_lease_and_a_renewal_is_checked():
    whole = messages.params_message({"generation": 1, "routes": []}, None, lease_s=120, epoch=0)
    assert messages.parse_message(whole, messages.Params).lease_s == 120.0
    assert messages.parse_message(messages.delta_message(delta(), lease_s=2.5, epoch=0), messages.Params).lease_s == 2.5
    renew = messages.renew_message(7, 30, 5)
    assert messages.parse_message(renew, messages.Renew) == messages.Renew(type="renew", generation=7, lease_s=30.0,
                                                                          epoch=5)
    for bad, problem in [
        ({key: value for key, value in whole.items() if key != "lease_s"}, "params message: lease_s: missing"),
        (dict(whole, lease_s=True), "params message: lease_s: true is not a number"),
        (dict(whole, lease_s=float("nan")), "params message: lease_s: NaN is not a finite number"),
        (dict(whole, lease_s=float("inf")), "params message: lease_s: Infinity is not a finite number"),
        (dict(whole, lease_s=0.5), "params message: lease_s: 0.5 is below the minimum 1"),
        (dict(whole, lease_s="60"), 'params message: lease_s: "60" is not a number'),
        (dict(renew, lease_s=86401), "renew message: lease_s: 86401 is above the maximum 86400"),
        (dict(renew, generation=0), "renew message: generation: 0 is out of range"),
        ({"type": "renew", "lease_s": 30, "epoch": 1}, "renew message: generation: missing"),
        ({key: value for key, value in whole.items() if key != "epoch"}, "params message: epoch: missing"),
        (dict(whole, epoch=-1), "params message: epoch: -1 is out of range"),
        (dict(whole, epoch=2**63), "params message: epoch: .* is out of range"),
        (dict(whole, epoch=True), "params message: epoch: true is not an integer"),
        (dict(renew, epoch=1.5), "renew message: epoch: 1.5 is not an integer"),
    ]:
        with pytest.raises(ProtocolError, match=problem):
            messages.parse_message(bad)
    # An agent reads only params and renewals from its controller.
    with pytest.raises(ProtocolError, match="type: expected params or renew"):
        messages.parse_message(messages.resync_message(8, 7), messages.Params, messages.Renew)


# -- a set is validated once: when it is made ------------------------------------------------


def test_routes_are_checked_once_when_made_and_stay_valid():
    """A RouteParams is validated when it is made (from JSON, or by the planner from its
    columns) and cannot change after: a set of them is checked as a whole (its generation,
    one route per destination) without checking a route again, and keeps the very objects."""
    made = paramset.RouteParams(**route())
    with pytest.raises(Exception, match="frozen"):
        made.initcwnd = 0  # type: ignore[misc]
    with pytest.raises(Exception, match="initcwnd"):
        paramset.RouteParams(**route(initcwnd=0))
    checked = paramset.validate_param_set({"generation": 5, "routes": [made]})
    assert checked.routes[0] is made
    assert paramset.validate_param_set(checked) is checked
    # Equal in Python is not the same on the wire: True == 1 and 3.0 == 3 are refused, naming the field.
    for value, field in ((True, "initcwnd"), (3.0, "cwnd_clamp"), (1, "quickack")):
        with pytest.raises(ValidationError, match=rf"routes\[0\]\.{field}"):
            paramset.validate_param_set(param_set(route(**{field: value}), generation=5))
    # The set's own rules still hold for routes made already: its generation, one route per destination.
    with pytest.raises(ValidationError, match=r"routes\[1\]\.dst: 10.0.0.2/32 duplicates routes\[0\]\.dst"):
        paramset.validate_param_set({"generation": 5, "routes": [made, made]})
    with pytest.raises(ValidationError, match="generation: true is not an integer"):
        paramset.validate_param_set({"generation": True, "routes": [made]})


def test_routes_with_the_same_parameters_are_equal_and_hash_alike_whoever_made_them():
    from_json = paramset.validate_param_set(param_set(route(), route(dst="10.0.0.3"))).routes
    made = [paramset.RouteParams.of("10.0.0.2/32", (14, 1, 3, None, None, True, None, None, None)),
            paramset.RouteParams.of("10.0.0.3", (14, 1, 3, None, None, True, None, None, None))]
    assert from_json == made and set(from_json) == set(made)
    assert paramset.same_parameters(paramset.ParamSet(generation=1, routes=from_json),
                                paramset.ParamSet(generation=2, routes=made[::-1]))
    assert made[0] != made[0].model_copy(update={"quickack": False})
