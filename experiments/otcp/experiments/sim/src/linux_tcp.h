// Linux's TCP where OTCP's comparisons depend on it, on top of ns-3's TcpSocketBase.
//
//   LinuxRtt        Linux's RTO estimator (tcp_rtt_estimator, __tcp_set_rto): RTO = SRTT + RTTVAR
//                   with RTTVAR >= rto_min, the per-round-trip decay of RTTVAR and the rounding of
//                   the RTO up to whole jiffies. ns-3's own estimator floors the whole RTO at MinRto.
//   ClampOps        a congestion-control wrapper: Linux's snd_cwnd_clamp (what a locked route cwnd
//                   or the agent's BPF TCP_BPF_SNDCWND_CLAMP sets) and Linux DCTCP's two-segment
//                   ssthresh floor, around any ns-3 algorithm.
//   LinuxTcpSocket  per-connection settings as a Linux host takes them from its route toward the peer
//                   (at connection set-up, as route metrics and the agent's BPF do), established
//                   connections following a new clamp and pacing rate at their next RTT sample (as the
//                   agent's BPF does at BPF_SOCK_OPS_RTT_CB), the route's quickack read at every
//                   segment received (as Linux reads it), delayed ACKs with Linux's quick-ACK mode
//                   (at the start, after idleness, at a first CE mark, at a CWR), the restart of an idle
//                   connection's window (tcp_slow_start_after_idle), and Linux's tail loss probe (TLP),
//                   which with a duplicate-ACK threshold of one (RACK in a network that never reorders,
//                   set by the scenario) recovers a lost tail without waiting for the RTO.
#pragma once

#include "forwarding_ops.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"

#include <algorithm>
#include <cstdint>
#include <functional>

namespace otcp
{
using namespace ns3;

//! Linux's largest RTO (TCP_RTO_MAX) and its first one (TCP_TIMEOUT_INIT).
constexpr int64_t kRtoMaxUs = 120 * 1000 * 1000;
constexpr int64_t kRtoInitialUs = 1000 * 1000;
//! Linux's delayed-ACK timer on a data-center path (TCP_ATO_MIN = TCP_DELACK_MIN = HZ/25 jiffies).
constexpr double kDelayedAckTimeoutS = 0.040;
//! Linux's largest quick-ACK burst (TCP_MAX_QUICKACKS).
constexpr uint32_t kMaxQuickAcks = 16;
//! What a loss probe's timeout adds to 2 x SRTT with one segment out (TCP_RTO_MIN, for a delayed ACK).
constexpr int64_t kProbeOneSegmentUs = 200000;

//! Microseconds rounded up to whole jiffies (usecs_to_jiffies, back in microseconds).
inline int64_t
CeilJiffies(int64_t us, int64_t jiffyUs)
{
    return (us + jiffyUs - 1) / jiffyUs * jiffyUs;
}

//! Whether an event is still to come (EventId::IsRunning became IsPending in ns-3 3.42; the
//! benchmark of the builds also compiles this against Debian's 3.37).
inline bool
Pending(const ns3::EventId& event)
{
#ifdef NS_DEPRECATED_3_42
    return event.IsPending();
#else
    return event.IsRunning();
#endif
}

/**
 * Linux's RTT estimator and RTO (net/ipv4/tcp_input.c, tcp_rtt_estimator and tcp_set_rto), in integer
 * microseconds as the kernel keeps them: srtt scaled by 8, mdev by 4. RTTVAR starts at
 * max(2 x RTT, rto_min), rises at once with the largest deviation of a round trip, falls by a quarter of
 * its excess per round trip toward that round trip's largest (which starts at rto_min each round trip),
 * so RTTVAR >= rto_min always and RTO = SRTT + RTTVAR, rounded up to jiffies.
 *
 * ns-3 computes RTO = max(SRTT + max(G, 4 x variation), MinRto); the socket sets G = 0 and MinRto = 0,
 * and this estimator reports SRTT and a variation of (RTO - SRTT) / 4, so ns-3's RTO is Linux's.
 * The round trip's end (snd_una past the sequence sent when it began) needs the socket's sequence
 * numbers: LinuxTcpSocket hands them over before each sample (SetSequence).
 */
class LinuxRtt : public RttEstimator
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("otcp::LinuxRtt").SetParent<RttEstimator>().AddConstructor<LinuxRtt>();
        return tid;
    }

    LinuxRtt() { Reset(); }

    TypeId GetInstanceTypeId() const override { return GetTypeId(); }

    //! rto_min as the route or BPF gave it, and the kernel's jiffy (1/HZ); both rounded as Linux does.
    void Configure(int64_t rtoMinUs, int64_t jiffyUs)
    {
        m_jiffyUs = jiffyUs;
        m_rtoMinUs = CeilJiffies(std::max<int64_t>(rtoMinUs, 1), jiffyUs);
        Publish();
    }

    //! The socket's snd_una (the ACK carrying the sample) and snd_nxt, before each sample.
    void SetSequence(uint32_t sndUna, uint32_t sndNxt)
    {
        m_sndUna = sndUna;
        m_sndNxt = sndNxt;
    }

    void Measurement(Time t) override
    {
        int64_t m = std::max<int64_t>(t.GetMicroSeconds(), 1);
        if (m_srtt8 != 0)
        {
            m -= (m_srtt8 >> 3); // the error of the estimate
            m_srtt8 += m;        // srtt = 7/8 srtt + 1/8 sample
            if (m < 0)
            {
                m = -m;
                m -= (m_mdev4 >> 2);
                if (m > 0)
                {
                    m >>= 3; // a falling sample moves mdev eight times less
                }
            }
            else
            {
                m -= (m_mdev4 >> 2);
            }
            m_mdev4 += m; // mdev = 3/4 mdev + 1/4 |error|
            if (m_mdev4 > m_mdevMax)
            {
                m_mdevMax = m_mdev4;
                m_rttvar = std::max(m_rttvar, m_mdevMax);
            }
            if (SequenceNumber32(m_sndUna) > SequenceNumber32(m_rttSeq)) // a round trip ended
            {
                if (m_mdevMax < m_rttvar)
                {
                    m_rttvar -= (m_rttvar - m_mdevMax) >> 2;
                }
                m_rttSeq = m_sndNxt;
                m_mdevMax = m_rtoMinUs;
            }
        }
        else
        {
            m_srtt8 = m << 3;
            m_mdev4 = m << 1; // RTO = 3 x RTT
            m_rttvar = std::max(m_mdev4, m_rtoMinUs);
            m_mdevMax = m_rttvar;
            m_rttSeq = m_sndNxt;
        }
        m_srtt8 = std::max<int64_t>(m_srtt8, 1);
        ++m_nSamples;
        Publish();
    }

    Ptr<RttEstimator> Copy() const override { return CopyObject<LinuxRtt>(this); }

    void Reset() override
    {
        m_srtt8 = m_mdev4 = m_mdevMax = m_rttvar = 0;
        m_nSamples = 0;
        Publish();
    }

    //! The RTO Linux would arm now (microseconds).
    int64_t RtoUs() const
    {
        if (m_srtt8 == 0)
        {
            return kRtoInitialUs;
        }
        return std::min(CeilJiffies((m_srtt8 >> 3) + m_rttvar, m_jiffyUs), kRtoMaxUs);
    }

    int64_t SrttUs() const { return m_srtt8 >> 3; }

    int64_t RttvarUs() const { return m_rttvar; }

  private:
    //! What ns-3's RTO formula reads: SRTT, and a variation that makes SRTT + 4 x variation the RTO.
    void Publish()
    {
        int64_t srttNs = (m_srtt8 >> 3) * 1000;
        int64_t rtoNs = RtoUs() * 1000;
        m_estimatedRtt = NanoSeconds(srttNs);
        m_estimatedVariation = NanoSeconds((rtoNs - srttNs + 3) / 4);
    }

    int64_t m_srtt8{0};
    int64_t m_mdev4{0};
    int64_t m_mdevMax{0};
    int64_t m_rttvar{0};
    uint32_t m_rttSeq{0};
    uint32_t m_sndUna{0};
    uint32_t m_sndNxt{0};
    int64_t m_rtoMinUs{200000};
    int64_t m_jiffyUs{4000};
};

/**
 * Linux's window clamp (snd_cwnd_clamp) around an ns-3 congestion control: cwnd is held at or below
 * the clamp after every hook that may grow it, and Linux DCTCP's floor of two segments under
 * ssthresh (dctcp_ssthresh), which ns-3's TcpDctcp lacks.
 */
class ClampOps : public ForwardingOps
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("otcp::ClampOps").SetParent<TcpCongestionOps>().AddConstructor<ClampOps>();
        return tid;
    }

    ClampOps() = default;

    ClampOps(const ClampOps& other)
        : ForwardingOps(other),
          m_clampBytes(other.m_clampBytes),
          m_ssthreshFloor(other.m_ssthreshFloor)
    {
    }

    static Ptr<ClampOps> Wrap(Ptr<TcpCongestionOps> inner, bool ssthreshFloor)
    {
        Ptr<ClampOps> ops = CreateObject<ClampOps>();
        ops->m_inner = inner;
        ops->m_ssthreshFloor = ssthreshFloor;
        return ops;
    }

    //! The clamp in bytes (0: none).
    void SetClamp(uint32_t bytes) { m_clampBytes = bytes ? bytes : UINT32_MAX; }

    uint32_t GetSsThresh(Ptr<const TcpSocketState> tcb, uint32_t bytesInFlight) override
    {
        uint32_t ssthresh = ForwardingOps::GetSsThresh(tcb, bytesInFlight);
        return m_ssthreshFloor ? std::max(ssthresh, 2 * tcb->m_segmentSize) : ssthresh;
    }

    void IncreaseWindow(Ptr<TcpSocketState> tcb, uint32_t segmentsAcked) override
    {
        ForwardingOps::IncreaseWindow(tcb, segmentsAcked);
        Clamp(tcb);
    }

    void PktsAcked(Ptr<TcpSocketState> tcb, uint32_t segmentsAcked, const Time& rtt) override
    {
        ForwardingOps::PktsAcked(tcb, segmentsAcked, rtt);
        Clamp(tcb);
    }

    void CongControl(Ptr<TcpSocketState> tcb,
                     const TcpRateOps::TcpRateConnection& rc,
                     const TcpRateOps::TcpRateSample& rs) override
    {
        ForwardingOps::CongControl(tcb, rc, rs);
        Clamp(tcb);
    }

    Ptr<TcpCongestionOps> Fork() override { return CopyObject<ClampOps>(this); }

  private:
    void Clamp(Ptr<TcpSocketState> tcb)
    {
        if (tcb->m_cWnd.Get() > m_clampBytes)
        {
            tcb->m_cWnd = m_clampBytes;
        }
        if (tcb->m_cWndInfl.Get() > m_clampBytes)
        {
            tcb->m_cWndInfl = m_clampBytes;
        }
    }

    uint32_t m_clampBytes{UINT32_MAX};
    bool m_ssthreshFloor{false};
};

//! What one host's TCP takes toward one peer: its route's attributes and the agent's BPF settings.
struct ConnSettings
{
    int64_t rtoMinUs{200000};    //!< rto_min (Linux's default 200 ms)
    uint32_t initcwnd{10};       //!< initial window, segments
    uint32_t clampSegments{0};   //!< window clamp, segments (0: none)
    bool clampSetsSsthresh{false}; //!< BPF's TCP_BPF_SNDCWND_CLAMP also sets ssthresh; a route's cwnd lock does not
    bool follows{false};         //!< established connections follow new clamps and rates (the agent's BPF)
    uint32_t segmentBytes{1448}; //!< payload per segment this host sends (the peer's advmss - 12)
    uint64_t pacingBps{0};       //!< SO_MAX_PACING_RATE in bits/s (0: not paced)
    bool quickack{false};        //!< acknowledge the peer's every segment at once (route quickack)
    uint32_t rcvWindowBytes{0};  //!< a static receive window this host advertises (0: autotuned)
};

//! The updates a connection follows: a new clamp and pacing rate (the agent's BPF at an RTT sample).
struct FollowedSettings
{
    uint32_t clampSegments{0};
    uint64_t pacingBps{0};
};

/**
 * TcpSocketBase with the Linux behaviour OTCP's schemes rely on (see the file's head).
 * Sockets are made with Make (not TcpL4Protocol's factory), so accepted sockets are LinuxTcpSockets too.
 */
class LinuxTcpSocket : public TcpSocketBase
{
  public:
    //! The settings toward a peer address, looked up at connection set-up (route lookup + BPF).
    using Lookup = std::function<ConnSettings(Ipv4Address peer)>;
    //! What an established connection to a peer follows now, and the generation it came with.
    using FollowLookup = std::function<std::pair<uint64_t, FollowedSettings>(Ipv4Address peer)>;

    static TypeId GetTypeId()
    {
        static TypeId tid =
            TypeId("otcp::LinuxTcpSocket").SetParent<TcpSocketBase>().AddConstructor<LinuxTcpSocket>();
        return tid;
    }

    TypeId GetInstanceTypeId() const override { return GetTypeId(); }

    LinuxTcpSocket() = default;

    LinuxTcpSocket(const LinuxTcpSocket& other)
        : TcpSocketBase(other),
          m_lookup(other.m_lookup),
          m_follow(other.m_follow),
          m_clampOps(nullptr),
          m_jiffyUs(other.m_jiffyUs),
          m_counters(other.m_counters),
          m_timeoutSink(other.m_timeoutSink)
    {
        m_clampOps = DynamicCast<ClampOps>(m_congestionControl);
    }

    /**
     * A socket on node, with congestion control cc (wrapped in ClampOps; the two-segment ssthresh floor
     * for DCTCP), ECN on when ecn, Linux's RTO with jiffy jiffyUs; counters: where its RTOs and
     * duplicate segments are counted (shared by every socket of a run).
     */
    static Ptr<LinuxTcpSocket> Make(Ptr<Node> node, TypeId cc, bool ecn, int64_t jiffyUs, uint64_t* counters)
    {
        Ptr<LinuxTcpSocket> socket = CreateObject<LinuxTcpSocket>();
        socket->SetNode(node);
        Ptr<TcpL4Protocol> tcp = node->GetObject<TcpL4Protocol>();
        socket->SetTcp(tcp);
        Ptr<LinuxRtt> rtt = CreateObject<LinuxRtt>();
        rtt->Configure(200000, jiffyUs);
        socket->SetRtt(rtt);
        ObjectFactory factory(cc.GetName());
        socket->m_clampOps = ClampOps::Wrap(factory.Create<TcpCongestionOps>(), cc == TcpDctcp::GetTypeId());
        socket->SetCongestionControlAlgorithm(socket->m_clampOps);
        socket->SetRecoveryAlgorithm(CreateObject<TcpPrrRecovery>());
        socket->SetUseEcn(ecn ? TcpSocketState::On : TcpSocketState::Off);
        socket->SetMinRto(Time(0));
        socket->SetClockGranularity(Time(0));
        socket->m_jiffyUs = jiffyUs;
        socket->m_counters = counters;
        tcp->AddSocket(socket);
        return socket;
    }

    //! How a listening socket finds the settings of the connections it accepts, and what they follow.
    void SetLookups(Lookup lookup, FollowLookup follow)
    {
        m_lookup = std::move(lookup);
        m_follow = std::move(follow);
    }

    //! How a connecting socket reads its route toward the peer after set-up (the route's quickack).
    void SetRouteLookup(Lookup lookup) { m_lookup = std::move(lookup); }

    //! Take settings toward a peer: before Connect() (active) or when a connection is accepted.
    void Apply(const ConnSettings& s)
    {
        m_settings = s;
        DynamicCast<LinuxRtt>(m_rtt)->Configure(s.rtoMinUs, m_jiffyUs);
        m_tcb->m_segmentSize = s.segmentBytes;
        m_txBuffer->SetSegmentSize(s.segmentBytes);
        uint32_t initcwnd = s.clampSegments ? std::min(s.initcwnd, s.clampSegments) : s.initcwnd;
        m_tcb->m_initialCWnd = initcwnd;
        m_delAckMaxCount = s.quickack ? 1 : 2;
        m_delAckTimeout = Seconds(kDelayedAckTimeoutS);
        if (s.rcvWindowBytes)
        {
            m_tcb->m_rxBuffer->SetMaxBufferSize(s.rcvWindowBytes);
        }
        SetClampAndRate(s.clampSegments, s.pacingBps, true);
    }

    uint32_t SegmentBytes() const { return m_tcb->m_segmentSize; }

    //! Also count this connection's retransmission timeouts into timeouts (a workload's flow, whose two
    //! ends both count into it).
    void CountTimeoutsInto(uint32_t* timeouts) { m_connectionTimeouts = timeouts; }

    //! Where a listening socket's connections count their timeouts, by the peer's address: from the SYN
    //! on, so that a SYN-ACK's retransmission is the flow's too.
    void SetTimeoutSink(std::function<uint32_t*(const Address&)> sink) { m_timeoutSink = std::move(sink); }

  protected:
    Ptr<TcpSocketBase> Fork() override { return CopyObject<LinuxTcpSocket>(this); }

    void CompleteFork(Ptr<Packet> p, const TcpHeader& h, const Address& from, const Address& to) override
    {
        m_peer = InetSocketAddress::ConvertFrom(from).GetIpv4();
        if (m_timeoutSink)
        {
            m_connectionTimeouts = m_timeoutSink(from);
        }
        if (m_lookup)
        {
            Apply(m_lookup(m_peer));
        }
        // The listener's SYN set cwnd from its own settings: a Linux connection's comes from its route.
        m_tcb->m_cWnd = m_tcb->m_initialCWnd * m_tcb->m_segmentSize;
        m_tcb->m_cWndInfl = m_tcb->m_cWnd;
        TcpSocketBase::CompleteFork(p, h, from, to);
    }

  public:
    int Connect(const Address& address) override
    {
        m_peer = InetSocketAddress::ConvertFrom(address).GetIpv4();
        return TcpSocketBase::Connect(address);
    }

    using Socket::Send;

    //! A send after an idle period longer than the RTO restarts the window (tcp_cwnd_restart).
    int Send(Ptr<Packet> p, uint32_t flags) override
    {
        if (m_state == ESTABLISHED && BytesInFlight() == 0 && !m_lastDataSent.IsZero())
        {
            Time idle = Simulator::Now() - m_lastDataSent;
            if (idle > m_rto.Get())
            {
                RestartWindow(idle);
            }
        }
        return TcpSocketBase::Send(p, flags);
    }

  protected:
    uint32_t SendDataPacket(SequenceNumber32 seq, uint32_t maxSize, bool withAck) override
    {
        m_lastDataSent = Simulator::Now();
        if (seq < m_tcb->m_highTxMark.Get())
        {
            ++m_counters[kRetransmissions];
        }
        if (m_tcb->m_pacing && m_tcb->m_pacingRate.Get().GetBitRate() == 0)
        {
            // ns-3 left no rate (one computed before any RTT sample is 0, and it divides by it); a Linux
            // socket without a computed sk_pacing_rate sends at its maximum pacing rate.
            m_tcb->m_pacingRate = m_tcb->m_maxPacingRate;
        }
        uint32_t sent = TcpSocketBase::SendDataPacket(seq, maxSize, withAck);
        ArmLossProbe();
        return sent;
    }

    void ReceivedAck(Ptr<Packet> packet, const TcpHeader& header) override
    {
        SequenceNumber32 head = m_txBuffer->HeadSequence();
        uint32_t sacked = m_txBuffer->GetSacked();
        bool recovering = m_tcb->m_congState.Get() == TcpSocketState::CA_RECOVERY;
        TcpSocketBase::ReceivedAck(packet, header);
        EndCwrAtItsEnd();
        RecoverFromCwr(head, sacked);
        DetectLostRetransmissions(head, sacked, recovering);
        if (m_probing && m_txBuffer->HeadSequence() > m_probeHigh)
        {
            m_probing = false; // the probe's segment was acknowledged: the next tail may be probed
        }
        ArmLossProbe();
    }

    void EstimateRtt(const TcpHeader& header) override
    {
        DynamicCast<LinuxRtt>(m_rtt)->SetSequence(header.GetAckNumber().GetValue(),
                                                  m_tcb->m_nextTxSequence.Get().GetValue());
        uint32_t samples = m_rtt->GetNSamples();
        TcpSocketBase::EstimateRtt(header);
        if (m_rtt->GetNSamples() != samples && m_settings.follows && m_follow)
        {
            auto [generation, followed] = m_follow(m_peer);
            if (generation != m_followedGeneration)
            {
                m_followedGeneration = generation;
                SetClampAndRate(followed.clampSegments, followed.pacingBps, false);
            }
        }
    }

    void DoForwardUp(Ptr<Packet> packet, const Address& from, const Address& to) override
    {
        // The first CE mark since the peer last reduced (Linux: TCP_ECN_DEMAND_CWR not yet set) puts the
        // receiver in quick-ACK mode for two segments: "better not delay acks, sender can have a very
        // low cwnd" (tcp_ecn_check_ce).
        bool demanding = m_ecnBefore == TcpSocketState::ECN_CE_RCVD || m_ecnBefore == TcpSocketState::ECN_SENDING_ECE;
        if (m_tcb->m_ecnState == TcpSocketState::ECN_CE_RCVD && !demanding)
        {
            m_quickAcks = std::max<uint32_t>(m_quickAcks, 2);
        }
        TcpSocketBase::DoForwardUp(packet, from, to);
        m_ecnBefore = m_tcb->m_ecnState;
    }

    void ReceivedData(Ptr<Packet> p, const TcpHeader& header) override
    {
        // Segments wholly below rcv_nxt: a retransmission of what had arrived (spurious).
        // Linux's quick-ACK mode (tcp_incr_quickack): the first data, data after an idle period longer
        // than the RTO, and what follows a retransmission of data that had arrived (tcp_data_queue:
        // "a retransmit ... force an immediate ack", then quick-ACK mode) are acknowledged at once, up
        // to half the receive window in segments, at most 16. After a spurious RTO the sender's window
        // is one segment, which a delayed ACK would otherwise hold past its next RTO, again and again.
        if (m_lookup)
        {
            // Linux reads the route's quickack at every ACK it may delay (tcp_in_quickack_mode reads
            // dst_metric(RTAX_QUICKACK)), so an established connection follows a changed route.
            m_delAckMaxCount = m_lookup(m_peer).quickack ? 1 : 2;
        }
        SequenceNumber32 end = header.GetSequenceNumber() + SequenceNumber32(p->GetSize());
        bool duplicate = p->GetSize() > 0 && end <= m_tcb->m_rxBuffer->NextRxSequence();
        m_counters[kDuplicateSegments] += duplicate ? 1 : 0;
        Time now = Simulator::Now();
        if (duplicate || m_lastDataReceived.IsZero() || now - m_lastDataReceived > m_rto.Get())
        {
            uint32_t window = m_tcb->m_rxBuffer->MaxBufferSize();
            uint32_t quick = window / (2 * std::max<uint32_t>(p->GetSize(), 1));
            m_quickAcks = std::max(m_quickAcks, std::min(quick ? quick : 2, kMaxQuickAcks));
        }
        m_lastDataReceived = now;
        // A segment that says its sender entered CWR is acknowledged at once: "its cwnd may be very
        // low (even just 1 packet)" (tcp_ecn_accept_cwr).
        bool cwr = (header.GetFlags() & TcpHeader::CWR) != 0;
        if ((m_quickAcks > 0 || cwr) && m_delAckMaxCount > 1 && p->GetSize() > 0)
        {
            m_quickAcks -= m_quickAcks > 0 && !cwr ? 1 : 0;
            uint32_t count = m_delAckMaxCount;
            m_delAckMaxCount = 1;
            TcpSocketBase::ReceivedData(p, header);
            m_delAckMaxCount = count;
            return;
        }
        TcpSocketBase::ReceivedData(p, header);
    }

    void DelAckTimeout() override
    {
        ++m_counters[kDelayedAckTimeouts];
        TcpSocketBase::DelAckTimeout();
    }

    void ReTxTimeout() override
    {
        // What ns-3 acts on (it also runs this with nothing out, in closing states): a SYN, or data or a FIN out.
        bool outstanding = m_state == SYN_SENT || m_state == SYN_RCVD || SegmentsOut() > 0;
        if (outstanding && m_state != CLOSED && m_state != TIME_WAIT)
        {
            ++m_counters[kTimeouts];
            if (m_connectionTimeouts)
            {
                ++*m_connectionTimeouts;
            }
        }
        TcpSocketBase::ReTxTimeout();
    }

  public:
    //! The counters every socket of a run adds to (indices into the counters array).
    enum Counter
    {
        kTimeouts = 0,
        kDuplicateSegments = 1,
        kRetransmissions = 2,
        kLossProbes = 3,
        kDelayedAckTimeouts = 4,
        kCounters = 5,
    };

  private:
    void SetClampAndRate(uint32_t clampSegments, uint64_t pacingBps, bool atStart)
    {
        uint32_t clampBytes = clampSegments * m_tcb->m_segmentSize;
        m_clampOps->SetClamp(clampBytes);
        if (clampBytes && m_settings.clampSetsSsthresh)
        {
            m_tcb->m_ssThresh = clampBytes;
            if (atStart)
            {
                m_tcb->m_initialSsThresh = clampBytes;
            }
        }
        if (pacingBps)
        {
            m_tcb->m_pacing = true;
            m_tcb->m_paceInitialWindow = true;
            m_tcb->m_maxPacingRate = DataRate(pacingBps);
        }
        else if (m_tcb->m_pacing)
        {
            // Linux keeps pacing a socket once SO_MAX_PACING_RATE was set; ~0 is no maximum.
            m_tcb->m_maxPacingRate = DataRate(UINT64_MAX / 2);
        }
    }

    /**
     * CWR ends once everything sent when it began is acknowledged (Linux: snd_una at high_seq, then
     * cwnd = ssthresh in tcp_end_cwnd_reduction); ns-3 ends it only past that point, so a reduction that
     * began with the last segment of a block never ended, and the next block of a persistent connection
     * started from the few segments PRR had left (one, which the receiver held for its delayed ACK).
     */
    void EndCwrAtItsEnd()
    {
        if (m_tcb->m_congState.Get() != TcpSocketState::CA_CWR || m_txBuffer->HeadSequence() < m_recover)
        {
            return;
        }
        m_tcb->m_congState = TcpSocketState::CA_OPEN;
        m_dupAckCount = 0;
        if (!m_congestionControl->HasCongControl())
        {
            m_tcb->m_cWnd = m_tcb->m_ssThresh.Get();
            m_recoveryOps->ExitRecovery(m_tcb);
            m_congestionControl->CwndEvent(m_tcb, TcpSocketState::CA_EVENT_COMPLETE_CWR);
        }
    }

    /**
     * A loss found in CWR (DCTCP's, after ECN echoes) starts recovery, as Linux's tcp_fastretrans_alert
     * does; ns-3 counts the duplicate ACKs there but recovers only from Open or Disorder, so the lost
     * segments waited for the RTO. (Linux keeps the ssthresh CWR set; ns-3's EnterRecovery sets it again.)
     */
    void RecoverFromCwr(SequenceNumber32 headBefore, uint32_t sackedBefore)
    {
        if (m_tcb->m_congState.Get() != TcpSocketState::CA_CWR)
        {
            return;
        }
        if (m_dupAckCount >= m_retxThresh || m_txBuffer->IsLost(m_highRxAckMark.Get()))
        {
            uint32_t sacked = m_txBuffer->GetSacked();
            uint32_t delivered =
                (m_txBuffer->HeadSequence() - headBefore) + (sacked > sackedBefore ? sacked - sackedBefore : 0);
            EnterRecovery(delivered);
        }
    }

    /**
     * RACK's detection of lost retransmissions (tcp_rack_detect_loss), which ns-3's recovery lacks: in
     * recovery, when the cumulative ACK has not moved for a round trip and a quarter (RACK's RTT plus its
     * reordering window) while selective ACKs for later-sent segments keep coming, what is neither
     * acknowledged nor selectively acknowledged is lost again, and is sent again as the window allows.
     */
    void DetectLostRetransmissions(SequenceNumber32 headBefore, uint32_t sackedBefore, bool wasRecovering)
    {
        if (m_tcb->m_congState.Get() != TcpSocketState::CA_RECOVERY)
        {
            return;
        }
        Time now = Simulator::Now();
        if (!wasRecovering || m_txBuffer->HeadSequence() > headBefore)
        {
            m_progressAt = now;
            return;
        }
        Time window = MicroSeconds(DynamicCast<LinuxRtt>(m_rtt)->SrttUs() * 5 / 4);
        if (m_txBuffer->GetSacked() > sackedBefore && now - m_progressAt > window)
        {
            m_txBuffer->SetSentListLost(false);
            m_progressAt = now;
            SendPendingData(m_connected);
        }
    }

    //! Segments sent and not yet cumulatively acknowledged (Linux's packets_out).
    uint32_t SegmentsOut() const
    {
        uint32_t bytes = m_tcb->m_highTxMark.Get() - m_txBuffer->HeadSequence();
        return (bytes + m_tcb->m_segmentSize - 1) / m_tcb->m_segmentSize;
    }

    //! tcp_schedule_loss_probe: with data out, in Open or CWR, a probe 2 x SRTT from now (plus 2 jiffies,
    //! or TCP_RTO_MIN with one segment out), never after the RTO; one probe per tail.
    void ArmLossProbe()
    {
        m_probeEvent.Cancel();
        auto state = m_tcb->m_congState.Get();
        if (m_state != ESTABLISHED || m_probing || SegmentsOut() == 0 ||
            (state != TcpSocketState::CA_OPEN && state != TcpSocketState::CA_CWR))
        {
            return;
        }
        int64_t srtt = DynamicCast<LinuxRtt>(m_rtt)->SrttUs();
        int64_t timeout = srtt ? CeilJiffies(2 * srtt, m_jiffyUs) + (SegmentsOut() == 1 ? kProbeOneSegmentUs
                                                                                         : 2 * m_jiffyUs)
                               : kRtoInitialUs;
        Time probe = MicroSeconds(timeout);
        if (Pending(m_retxEvent))
        {
            probe = std::min(probe, Simulator::GetDelayLeft(m_retxEvent));
        }
        m_probeEvent = Simulator::Schedule(probe, &LinuxTcpSocket::SendLossProbe, Ptr<LinuxTcpSocket>(this));
    }

    //! tcp_send_loss_probe: send the last segment again, so that its (selective) ACK shows what was lost.
    void SendLossProbe()
    {
        auto state = m_tcb->m_congState.Get();
        if (m_state != ESTABLISHED || SegmentsOut() == 0 ||
            (state != TcpSocketState::CA_OPEN && state != TcpSocketState::CA_CWR))
        {
            return;
        }
        SequenceNumber32 high = m_tcb->m_highTxMark.Get();
        uint32_t last = std::min<uint32_t>(m_tcb->m_segmentSize, high - m_txBuffer->HeadSequence());
        if (m_txBuffer->GetSacked() > 0)
        {
            return; // selective ACKs are in: the losses they show are being recovered
        }
        m_probing = true;
        m_probeHigh = high;
        ++m_counters[kLossProbes];
        SendDataPacket(high - last, last, true);
    }

    //! tcp_cwnd_restart: halve cwnd for every RTO of idleness, down to the initial window.
    void RestartWindow(Time idle)
    {
        uint32_t restart = std::min<uint32_t>(m_tcb->m_initialCWnd * m_tcb->m_segmentSize, m_tcb->m_cWnd);
        m_tcb->m_ssThresh = std::max<uint32_t>(m_tcb->m_ssThresh, (m_tcb->m_cWnd >> 1) + (m_tcb->m_cWnd >> 2));
        uint32_t cwnd = m_tcb->m_cWnd;
        for (int64_t rtos = idle.GetNanoSeconds() / std::max<int64_t>(m_rto.Get().GetNanoSeconds(), 1);
             rtos > 0 && cwnd > restart;
             --rtos)
        {
            cwnd >>= 1;
        }
        m_tcb->m_cWnd = std::max(cwnd, restart);
        m_tcb->m_cWndInfl = m_tcb->m_cWnd;
    }

    Lookup m_lookup;
    FollowLookup m_follow;
    Ptr<ClampOps> m_clampOps;
    ConnSettings m_settings;
    Ipv4Address m_peer;
    uint64_t m_followedGeneration{0};
    int64_t m_jiffyUs{4000};
    uint64_t* m_counters{nullptr};
    uint32_t* m_connectionTimeouts{nullptr};
    std::function<uint32_t*(const Address&)> m_timeoutSink;
    Time m_lastDataSent;
    Time m_lastDataReceived;
    uint32_t m_quickAcks{0};
    EventId m_probeEvent;
    Time m_progressAt;
    bool m_probing{false};
    SequenceNumber32 m_probeHigh;
    TcpSocketState::EcnState_t m_ecnBefore{TcpSocketState::ECN_DISABLED};
};

} // namespace otcp
