"""Numbers both peers agree on: protocol version, frame sizes, parameter ranges."""

#: 2 added `advmss` to every route of a parameter set; 3 the agent's `rtt`
#: report of the round trips it measures; 4 `enforcement` (BPF or routes
#: alone, and why) in the hello and every ack; 5 `pacing_rate` (bytes/s or
#: null) in every route of a parameter set; 6 deltas: a params message carries
#: a whole set or a delta against the acknowledged generation, the agent's
#: ``resync`` asks for the whole set, and ``peers`` is sent only when it changed;
#: 7 leases: a params message carries the set's ``lease_s``, and the controller's
#: ``renew`` restarts the lease of the acknowledged generation; 8 long fat paths:
#: ``congctl``, ``ssthresh`` and ``increase`` (each a value or null) in every route,
#: and the agent's ack says which of them its host enforces; 9 epochs: every params and
#: renew message carries the ``epoch`` of the controller's authority over the host (the
#: OpenFlow generation id it became master of the host's switch with), and the agent tells
#: every controller it is connected to what it holds (``held``); 10 fan-in admission: a set
#: carries ``admit``, the most senders its host may ask to send to it at once (or null), and a
#: delta carries it where it changed; 11 the agent's ``connections`` report: how many of its
#: connections to each destination sent data lately (several senders sharing one host).
VERSION = 11

#: The closed port every agent's round-trip probe (a TCP SYN) goes to; the destination's kernel
#: answers with a RST from it. The controller forwards these without a flow-counting entry.
RTT_PROBE_PORT = 9

#: Largest frame either side accepts once authenticated (a 10 000-route set is about 1 MB).
MAX_FRAME_BYTES = 8 * 1024 * 1024
#: Largest frame accepted before authentication (challenge, auth, welcome).
MAX_HANDSHAKE_FRAME_BYTES = 1024
#: Largest hello the controller accepts.
MAX_HELLO_FRAME_BYTES = 64 * 1024

NONCE_BYTES = 32
MAC_BYTES = 32

#: Inclusive ranges of the route parameters an agent accepts.
RTO_MIN_MS = (1, 1000)
INITCWND = (1, 256)
CWND_CLAMP = (1, 65535)
ADVMSS = (64, 65535)
#: bytes/s. The top is what the sock_ops program can hand SO_MAX_PACING_RATE
#: (an int from BPF; 2^32 - 1 would mean "unlimited"): about 34 Gb/s.
PACING_RATE = (1, 2**32 - 2)
#: Initial slow-start threshold, segments: the kernel's floor of 2, and below
#: otcp_scalable's sane-window bound of 2^20.
SSTHRESH = (2, 2**20 - 1)
#: GridDT's additive increase A, segments per round trip (otcp_scalable's map holds up to 255).
INCREASE = (1, 255)
#: The senders a receiver may ask at once under fan-in admission (a 16-bit count of flows).
ADMIT = (1, 65535)
#: The connections one host reports sending to one destination (a 16-bit count, as ADMIT).
CONNECTIONS = (1, 65535)
#: A congestion control's name as the kernel takes it (TCP_CA_NAME_MAX is 16 with the NUL).
CONGCTL_PATTERN = r"^[a-z0-9_]{1,15}$"
GENERATION = (1, 2**63 - 1)
#: A controller's epoch: an OpenFlow master election generation id, which switches compare as
#: a signed 64-bit difference; 0 for a controller that is no switch's master by election
#: (a test's lone agent server).
EPOCH = (0, 2**63 - 1)
#: Seconds a set's lease may last: from a second to a day.
LEASE_S = (1, 86400)
