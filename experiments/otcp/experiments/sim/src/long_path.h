// Long fat paths in ns-3 (mode "longpath", docs/longpaths.md): bulk flows with their own round trips
// through one bottleneck, for the responsiveness after one loss and RTT fairness.
//
//   OtcpScalableOps  otcp_scalable's window rules (otcp/bpf/src/otcp_scalable.bpf.c): above 16
//                    segments Scalable TCP (a = 0.01 per segment acknowledged, a loss cuts 1/8),
//                   at or below it AIMD with GridDT's increase A per round trip and halving; in
//                    GridDT mode AIMD with A at every window. A = 1 without GridDT mode is Reno below 16.
//   OneDrop          an error model that drops the next data packet once armed: "one loss".
//   LongPathRun      senders, each behind an access link of its own delay, into one bottleneck of
//                    the given rate and drop-tail buffer toward the receiver; per flow the bytes the
//                    receiver read in every bin, and the bytes the bottleneck sent; with a drop, one
//                    data packet is dropped after_full_s after the first bin the bottleneck sends at
//                    full rate, and the
//                    first bin after it in which the bottleneck sends at the recovery fraction of its
//                    capacity ends the run (the receiver's reads jump when the retransmission fills
//                    the hole: the link's rate is what the sender's window allows).
#pragma once

#include "forwarding_ops.h"
#include "next_seg.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace otcp
{
using namespace ns3;

void Emit(const nlohmann::json& line); // otcp_sim.cc: one JSON line out

class OtcpScalableOps : public TcpNewReno
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("otcp::OtcpScalableOps")
                                .SetParent<TcpNewReno>()
                                .AddConstructor<OtcpScalableOps>()
                                .AddAttribute("Increase",
                                              "GridDT's A: segments per round trip where AIMD holds",
                                              DoubleValue(1.0),
                                              MakeDoubleAccessor(&OtcpScalableOps::m_increase),
                                              MakeDoubleChecker<double>(0.0039, 255.0))
                                .AddAttribute("GridDt",
                                              "AIMD with A at every window instead of Scalable TCP above 16",
                                              BooleanValue(false),
                                              MakeBooleanAccessor(&OtcpScalableOps::m_griddt),
                                              MakeBooleanChecker());
        return tid;
    }

    OtcpScalableOps() = default;
    OtcpScalableOps(const OtcpScalableOps& other) = default;

    std::string GetName() const override
    {
        return "OtcpScalableOps";
    }

    Ptr<TcpCongestionOps> Fork() override
    {
        return CopyObject<OtcpScalableOps>(this);
    }

    uint32_t GetSsThresh(Ptr<const TcpSocketState> tcb, uint32_t bytesInFlight) override
    {
        uint32_t seg = tcb->m_segmentSize;
        uint32_t cwnd = tcb->m_cWnd.Get() / seg;
        uint32_t kept = Scalable(cwnd) ? cwnd - cwnd / 8 : cwnd / 2; // otcp_scalable cuts the window, not flight
        return std::max(2u, kept) * seg;
    }

  protected:
    void CongestionAvoidance(Ptr<TcpSocketState> tcb, uint32_t segmentsAcked) override
    {
        if (segmentsAcked == 0)
        {
            return;
        }
        uint32_t seg = tcb->m_segmentSize;
        uint32_t cwnd = tcb->m_cWnd.Get() / seg;
        // Segments of window gained, carried in fractions between ACKs (the kernel's snd_cwnd_cnt).
        m_credit += Scalable(cwnd) ? kA * segmentsAcked : m_increase * segmentsAcked / std::max(1u, cwnd);
        if (m_credit >= 1.0)
        {
            uint32_t whole = uint32_t(m_credit);
            m_credit -= whole;
            tcb->m_cWnd = tcb->m_cWnd.Get() + whole * seg;
        }
    }

  private:
    static constexpr double kA = 0.01;
    static constexpr uint32_t kLegacyWindow = 16;

    bool Scalable(uint32_t cwndSegments) const
    {
        return !m_griddt && cwndSegments > kLegacyWindow;
    }

    double m_increase{1.0};
    bool m_griddt{false};
    double m_credit{0.0};
};

NS_OBJECT_ENSURE_REGISTERED(OtcpScalableOps);

/**
 * An initial ssthresh around any ns-3 algorithm, as otcp_scalable's map gives it: set at the first
 * ACK where the connection holds none yet (still unbounded). ns-3 3.44 sets a connection's
 * ssthresh to the unbounded value when it is established, whatever InitialSlowStartThreshold says.
 */
class InitialSsthreshOps : public ForwardingOps
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid =
            TypeId("otcp::InitialSsthreshOps").SetParent<TcpCongestionOps>().AddConstructor<InitialSsthreshOps>();
        return tid;
    }

    InitialSsthreshOps() = default;

    InitialSsthreshOps(const InitialSsthreshOps& other)
        : ForwardingOps(other),
          m_bytes(other.m_bytes)
    {
    }

    static Ptr<InitialSsthreshOps> Wrap(Ptr<TcpCongestionOps> inner, uint32_t bytes)
    {
        Ptr<InitialSsthreshOps> ops = CreateObject<InitialSsthreshOps>();
        ops->m_inner = inner;
        ops->m_bytes = bytes;
        return ops;
    }

    void IncreaseWindow(Ptr<TcpSocketState> tcb, uint32_t segmentsAcked) override
    {
        if (m_bytes > 0 && tcb->m_ssThresh.Get() == UINT32_MAX)
        {
            tcb->m_ssThresh = m_bytes;
        }
        ForwardingOps::IncreaseWindow(tcb, segmentsAcked);
    }

    Ptr<TcpCongestionOps> Fork() override { return CopyObject<InitialSsthreshOps>(this); }

  private:
    uint32_t m_bytes{0};
};

NS_OBJECT_ENSURE_REGISTERED(InitialSsthreshOps);

//! Drops the next packet longer than a pure ACK once armed, then none.
class OneDrop : public ErrorModel
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("otcp::OneDrop").SetParent<ErrorModel>().AddConstructor<OneDrop>();
        return tid;
    }

    void Arm()
    {
        m_armed = true;
    }

    double droppedAtS{-1.0};

  private:
    bool DoCorrupt(Ptr<Packet> p) override
    {
        if (!m_armed || p->GetSize() < 500)
        {
            return false;
        }
        m_armed = false;
        droppedAtS = Simulator::Now().GetSeconds();
        return true;
    }

    void DoReset() override
    {
        m_armed = false;
    }

    bool m_armed{false};
};

NS_OBJECT_ENSURE_REGISTERED(OneDrop);

class LongPathRun
{
  public:
    using json = nlohmann::json;

    explicit LongPathRun(const json& doc)
        : m_doc(doc)
    {
    }

    json Run()
    {
        const json& d = m_doc;
        uint64_t rate = d.at("bottleneck_bps").get<uint64_t>();
        m_capacityBps = double(rate);
        uint32_t mss = d.at("mss_bytes").get<uint32_t>();
        m_mss = mss;
        // The links' IP MTU: 1500 unless the scenario gives jumbo frames (the segment, IPv4, TCP
        // and its timestamp option must fit one packet: ns-3 would fragment otherwise).
        uint32_t mtu = d.value("mtu_bytes", 1500U);
        if (mss + 52 > mtu)
        {
            throw std::runtime_error("mss_bytes " + std::to_string(mss) + " plus 52 B of headers exceeds mtu_bytes " +
                                     std::to_string(mtu));
        }
        m_binS = d.at("bin_s").get<double>();
        double duration = d.at("duration_s").get<double>();
        m_durationS = duration;
        m_progressS = d.value("progress_s", 0.0);
        const json& flows = d.at("flows");
        Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(mss));
        Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(d.at("snd_buf_bytes").get<uint32_t>()));
        Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(d.at("rcv_buf_bytes").get<uint32_t>()));
        Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
        Config::SetDefault("ns3::TcpCubic::HyStart", BooleanValue(false));
        SetSkipIdleLostScan(d.value("skip_idle_lost_scan", false));

        NodeContainer senders;
        senders.Create(flows.size());
        NodeContainer routers;
        routers.Create(2);
        Ptr<Node> receiver = CreateObject<Node>();
        InternetStackHelper stack;
        stack.Install(senders);
        stack.Install(routers);
        stack.Install(receiver);

        PointToPointHelper access;
        access.SetDeviceAttribute("DataRate", DataRateValue(DataRate(rate * 4)));
        access.SetDeviceAttribute("Mtu", UintegerValue(mtu));
        access.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", QueueSizeValue(QueueSize("100000p")));
        PointToPointHelper bottleneck;
        bottleneck.SetDeviceAttribute("DataRate", DataRateValue(DataRate(rate)));
        bottleneck.SetDeviceAttribute("Mtu", UintegerValue(mtu));
        bottleneck.SetChannelAttribute("Delay", TimeValue(MicroSeconds(kCoreOneWayUs)));
        bottleneck.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize",
                            QueueSizeValue(QueueSize(std::to_string(d.at("buffer_bytes").get<uint64_t>()) + "B")));
        TrafficControlHelper tc;
        Ipv4AddressHelper addresses;
        std::vector<NetDeviceContainer> links;
        for (uint32_t i = 0; i < flows.size(); ++i)
        {
            // The round trip is the access links' both ways plus the core's (the bottleneck and the receiver's link).
            double accessOneWayS = flows[i].at("rtt_s").get<double>() / 2 - 2 * kCoreOneWayUs * 1e-6;
            if (!(accessOneWayS >= 0))
            {
                throw std::runtime_error("a flow's rtt_s is below the core's round trip");
            }
            access.SetChannelAttribute("Delay", TimeValue(Seconds(accessOneWayS)));
            links.push_back(access.Install(senders.Get(i), routers.Get(0)));
        }
        NetDeviceContainer core = bottleneck.Install(routers.Get(0), routers.Get(1));
        core.Get(0)->TraceConnectWithoutContext("PhyTxEnd", MakeCallback(&LongPathRun::OnLinkTx, this));
        DynamicCast<PointToPointNetDevice>(core.Get(0))
            ->GetQueue()
            ->TraceConnectWithoutContext("Drop", MakeCallback(&LongPathRun::OnQueueDrop, this));
        // Without a queue disc the traffic-control layer drops what arrives while the device's queue
        // is stopped (full to within a packet): the bottleneck's tail drops are counted there.
        routers.Get(0)->GetObject<TrafficControlLayer>()->TraceConnectWithoutContext(
            "TcDrop", MakeCallback(&LongPathRun::OnQueueDrop, this));
        access.SetChannelAttribute("Delay", TimeValue(MicroSeconds(kCoreOneWayUs)));
        NetDeviceContainer last = access.Install(routers.Get(1), receiver);
        links.push_back(core);
        links.push_back(last);
        Ipv4Address sinkAddress;
        for (uint32_t k = 0; k < links.size(); ++k)
        {
            std::string base = "10." + std::to_string(1 + k / 250) + "." + std::to_string(k % 250) + ".0";
            addresses.SetBase(base.c_str(), "255.255.255.0");
            Ipv4InterfaceContainer assigned = addresses.Assign(links[k]);
            tc.Uninstall(links[k]); // the devices' drop-tail queues are the queues
            if (k + 1 == links.size())
            {
                sinkAddress = assigned.GetAddress(1);
            }
        }
        Ipv4GlobalRoutingHelper::PopulateRoutingTables();

        Ptr<OneDrop> drop;
        if (d.contains("drop") && !d.at("drop").is_null())
        {
            drop = CreateObject<OneDrop>();
            core.Get(1)->SetAttribute("ReceiveErrorModel", PointerValue(drop));
            m_dropFlow = d.at("drop").at("flow").get<uint32_t>();
            m_dropAfterFullS = d.at("drop").at("after_full_s").get<double>();
            m_recoverFraction = d.at("drop").at("recover_fraction").get<double>();
            m_drop = drop;
        }

        Ptr<Socket> listener = Socket::CreateSocket(receiver, TcpSocketFactory::GetTypeId());
        listener->Bind(InetSocketAddress(Ipv4Address::GetAny(), kPort));
        listener->Listen();
        listener->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                    MakeCallback(&LongPathRun::OnAccept, this));
        m_bins.resize(flows.size());
        for (uint32_t i = 0; i < flows.size(); ++i)
        {
            const json& f = flows[i];
            Ptr<Socket> s = Socket::CreateSocket(senders.Get(i), TcpSocketFactory::GetTypeId());
            Ptr<TcpSocketBase> tcp = DynamicCast<TcpSocketBase>(s);
            std::string cc = f.at("cc").get<std::string>();
            Ptr<TcpCongestionOps> ops;
            if (cc == "cubic")
            {
                ops = CreateObject<TcpCubic>();
            }
            else if (cc == "reno")
            {
                ops = CreateObject<TcpLinuxReno>();
            }
            else if (cc == "scalable" || cc == "griddt")
            {
                ops = CreateObject<OtcpScalableOps>();
                ops->SetAttribute("Increase", DoubleValue(f.value("increase", 1.0)));
                ops->SetAttribute("GridDt", BooleanValue(cc == "griddt"));
            }
            else
            {
                throw std::runtime_error("unknown cc " + cc);
            }
            uint32_t ssthresh = f.value("ssthresh_segments", 0u); // 0: unbounded, as the kernel's
            tcp->SetCongestionControlAlgorithm(InitialSsthreshOps::Wrap(ops, ssthresh * mss));
            s->Bind();
            m_senders.push_back(s);

            Simulator::Schedule(Seconds(f.value("start_s", 0.0)), [this, s, sinkAddress]() {
                s->Connect(InetSocketAddress(sinkAddress, kPort));
            });
            s->SetConnectCallback(MakeCallback(&LongPathRun::OnConnected, this),
                                  MakeNullCallback<void, Ptr<Socket>>());
            s->SetSendCallback(MakeCallback(&LongPathRun::Fill, this));
            // Which sender a connection at the receiver belongs to: by its source address.
            m_senderAddress.push_back(links[i].Get(0)->GetNode()->GetObject<Ipv4>()->GetAddress(1, 0).GetLocal());
        }
        Simulator::Schedule(Seconds(m_binS), &LongPathRun::Bin, this);
        Simulator::Stop(Seconds(duration));
        Simulator::Run();
        json bins = json::array();
        for (const auto& b : m_bins)
        {
            bins.push_back(b);
        }
        json result = {{"bin_s", m_binS},
                       {"bins_bytes", bins},
                       {"link_bins_bytes", m_linkBins},
                       {"bottleneck_drops", m_bottleneckDrops},
                       {"sim_s", Simulator::Now().GetSeconds()}};
        if (drop)
        {
            result["drop_s"] = drop->droppedAtS >= 0 ? json(drop->droppedAtS) : json(nullptr);
            result["recovered_s"] = m_recoveredS >= 0 ? json(m_recoveredS) : json(nullptr);
            result["rate_before_bps"] = m_rateBefore;

        }
        return result;
    }

  private:
    static constexpr uint16_t kPort = 5001;
    static constexpr int64_t kCoreOneWayUs = 500;
    //! A bin at this share of the capacity is full rate (PPP framing aside, the link's bytes are the wire's).
    static constexpr double kFullShare = 0.99;

    void OnLinkTx(Ptr<const Packet> p)
    {
        m_linkCurrent += p->GetSize();
    }

    void OnQueueDrop(Ptr<const Packet>)
    {
        ++m_bottleneckDrops;
    }

    void OnConnected(Ptr<Socket> s)
    {
        Fill(s, s->GetTxAvailable());
    }

    void Fill(Ptr<Socket> s, uint32_t)
    {
        while (s->GetTxAvailable() > 0)
        {
            uint32_t size = std::min<uint32_t>(s->GetTxAvailable(), 65536);
            if (s->Send(Create<Packet>(size)) < 0)
            {
                break;
            }
        }
    }

    void OnAccept(Ptr<Socket> s, const Address& from)
    {
        Ipv4Address peer = InetSocketAddress::ConvertFrom(from).GetIpv4();
        uint32_t flow = 0;
        while (flow < m_senderAddress.size() && m_senderAddress[flow] != peer)
        {
            ++flow;
        }
        m_flowOf[s] = flow;
        m_current.resize(m_senderAddress.size(), 0);
        s->SetRecvCallback(MakeCallback(&LongPathRun::OnRecv, this));
    }

    void OnRecv(Ptr<Socket> s)
    {
        uint32_t flow = m_flowOf[s];
        // A segment at a time: one read of everything concatenates it into one packet by copying
        // (TcpRxBuffer::Extract), which costs the square of what a filled hole releases.
        while (Ptr<Packet> p = s->Recv(m_mss, 0))
        {
            m_current[flow] += p->GetSize();
        }
    }


    void Bin()
    {
        m_current.resize(m_senderAddress.size(), 0);
        for (uint32_t i = 0; i < m_bins.size(); ++i)
        {
            m_bins[i].push_back(m_current[i]);
            m_current[i] = 0;
        }
        m_linkBins.push_back(m_linkCurrent);
        m_linkCurrent = 0;
        double now = Simulator::Now().GetSeconds();
        if (m_progressS > 0 && now >= m_progressAtS + m_progressS)
        {
            m_progressAtS = now;
            Emit({{"event", "progress"}, {"t", now}, {"end", m_durationS}});
        }
        if (m_drop && !m_fullSeen && m_linkBins.back() * 8.0 / m_binS >= kFullShare * m_capacityBps)
        {
            // At full rate: the drop is armed after_full_s later.
            m_fullSeen = true;
            Simulator::Schedule(Seconds(m_dropAfterFullS), [this]() {
                m_drop->Arm();
                m_armedBin = m_linkBins.size();
            });
        }
        if (m_drop && m_armedBin > 0 && m_recoveredS < 0 && m_drop->droppedAtS >= 0)
        {
            const auto& bins = m_linkBins;
            if (m_rateBefore == 0)
            {
                m_rateBefore = bins[m_armedBin - 1] * 8.0 / m_binS; // the last whole bin before the drop
            }
            if (now - m_binS > m_drop->droppedAtS && bins.back() * 8.0 / m_binS >= m_recoverFraction * m_capacityBps)
            {
                m_recoveredS = now;
                Simulator::Stop(Seconds(m_binS)); // one more bin, then the run ends
            }
        }
        Simulator::Schedule(Seconds(m_binS), &LongPathRun::Bin, this);
    }

    const json& m_doc;
    double m_binS{0.1};
    double m_durationS{0};
    double m_progressS{0}; // simulated seconds between progress lines; 0: none
    double m_progressAtS{0};
    uint32_t m_mss{1448};
    std::vector<Ptr<Socket>> m_senders;
    std::vector<Ipv4Address> m_senderAddress;
    std::map<Ptr<Socket>, uint32_t> m_flowOf;
    std::vector<uint64_t> m_current;
    std::vector<std::vector<uint64_t>> m_bins;
    std::vector<uint64_t> m_linkBins;
    uint64_t m_linkCurrent{0};

    uint64_t m_bottleneckDrops{0};
    Ptr<OneDrop> m_drop;
    uint32_t m_dropFlow{UINT32_MAX};
    double m_dropAfterFullS{0};
    double m_recoverFraction{0.95};
    bool m_fullSeen{false};
    size_t m_armedBin{0};
    double m_rateBefore{0};
    double m_capacityBps{0};
    double m_recoveredS{-1};
};

} // namespace otcp
