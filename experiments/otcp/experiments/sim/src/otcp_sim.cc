// otcp-sim: OTCP's incast on an ns-3 fabric, driven by otcp.experiments.sim (otcp-experiment simulate).
//
// Reads one JSON document (the scenario: fabric, queues, TCP, workload, settings per host pair) from the
// first line of standard input and writes JSON lines to standard output:
//   {"event": "round", ...}   after every round (progress);
//   {"event": "poll", ...}    at every controller poll of a closed loop: the packets and bytes each host
//                             pair has sent so far; the driver answers with one JSON line of new settings;
//   {"event": "progress", ...} every workload.progress_s simulated seconds of a workload (progress);
//   {"event": "result", ...}  at the end: rounds or flows, counters, queues, the probe, the simulator's cost.
// Modes: "incast" (the rounds), "workload" (a list of flows, each pulled over a new connection: a
// "mix" flow or a "query" response of its bytes, or a "background" flow until the measured time ends),
// "ceiling" (one bulk flow's goodput), "longpath" (bulk flows of long round trips through one
// bottleneck, with or without one loss: long_path.h), "rto-model" (LinuxRtt on a sequence of RTT
// samples, for the tests). Errors go to standard error with exit status 2.
#include "linux_tcp.h"
#include "long_path.h"
#include "marking_fifo.h"

#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <chrono>
#include <ctime>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/resource.h>
#include <unordered_map>
#include <vector>

using json = nlohmann::json;

namespace otcp
{

NS_OBJECT_ENSURE_REGISTERED(LinuxRtt);
NS_OBJECT_ENSURE_REGISTERED(ClampOps);
NS_OBJECT_ENSURE_REGISTERED(LinuxTcpSocket);
NS_OBJECT_ENSURE_REGISTERED(MarkingFifo);

constexpr uint16_t kWorkloadPort = 5001;
constexpr uint16_t kEchoPort = 7;
constexpr uint32_t kRequestBytes = 4;
//! What an Ethernet switch counts beyond the IP packet (its flow statistics leave the FCS out).
constexpr uint32_t kEthernetHeaderBytes = 14;
//! A ping's IP packet is 84 bytes: 56 of payload under UDP's 8 and IP's 20.
constexpr uint32_t kProbePayload = 56;

[[noreturn]] void
Fail(const std::string& message)
{
    std::cerr << "otcp-sim: " << message << std::endl;
    std::exit(2);
}

void
Emit(const json& line)
{
    std::cout << line.dump() << std::endl;
}

//! A host's settings toward each peer, as its routes and the agent hold them, and their generation.
struct HostTable
{
    ConnSettings fallback;
    std::unordered_map<uint32_t, ConnSettings> peers;
    uint64_t generation{1};

    ConnSettings Get(Ipv4Address peer) const
    {
        auto found = peers.find(peer.Get());
        return found == peers.end() ? fallback : found->second;
    }
};

//! A workload flow's client as its server sees it: the client's address and port.
uint64_t
ClientKey(Ipv4Address address, uint16_t port)
{
    return (uint64_t(address.Get()) << 16) | port;
}

ConnSettings
ParseSettings(const json& j, const ConnSettings& base)
{
    ConnSettings s = base;
    s.rtoMinUs = j.value("rto_min_us", s.rtoMinUs);
    s.initcwnd = j.value("initcwnd", s.initcwnd);
    s.clampSegments = j.value("clamp_segments", s.clampSegments);
    s.clampSetsSsthresh = j.value("clamp_sets_ssthresh", s.clampSetsSsthresh);
    s.follows = j.value("follows", s.follows);
    s.segmentBytes = j.value("segment_bytes", s.segmentBytes);
    s.pacingBps = j.value("pacing_bps", s.pacingBps);
    s.quickack = j.value("quickack", s.quickack);
    s.rcvWindowBytes = j.value("rcv_window_bytes", s.rcvWindowBytes);
    if (s.segmentBytes < 64 || s.segmentBytes > 1448 || s.initcwnd < 1 || s.rtoMinUs < 1)
    {
        Fail("settings out of range: " + j.dump());
    }
    return s;
}

//! One switch egress or host queue and what happened in it during the measured rounds.
struct QueueStats
{
    std::string from, to;
    bool onSwitch{false};
    uint64_t drops{0};
    uint64_t marks{0};
    uint32_t peakBytes{0};
    uint32_t bytes{0};
    double byteSeconds{0};
    double since{0};

    void Bytes(uint32_t, uint32_t now)
    {
        double t = Simulator::Now().GetSeconds();
        byteSeconds += double(bytes) * (t - since);
        since = t;
        bytes = now;
        peakBytes = std::max(peakBytes, now);
    }

    void Restart()
    {
        drops = marks = 0;
        byteSeconds = 0;
        since = Simulator::Now().GetSeconds();
        peakBytes = bytes;
    }
};

class Scenario;

//! The packet account of the measured rounds: every IPv4 packet a host sent in them is delivered to a
//! host, dropped in a named queue, or still unaccounted for at the end. Packets are known by their uid,
//! which a retransmission of the same segment shares: copies in flight are counted per uid.
struct Account
{
    bool open{false};
    std::unordered_map<uint64_t, uint32_t> inFlight;
    uint64_t sent{0};
    uint64_t delivered{0};

    void Sent(uint64_t uid)
    {
        if (open)
        {
            ++inFlight[uid];
            ++sent;
        }
    }

    //! Whether the packet was sent during the measured rounds (and is now accounted for).
    bool Left(uint64_t uid)
    {
        auto found = inFlight.find(uid);
        if (found == inFlight.end())
        {
            return false;
        }
        if (--found->second == 0)
        {
            inFlight.erase(found);
        }
        return true;
    }

    uint64_t Unaccounted() const
    {
        uint64_t count = 0;
        for (const auto& [uid, copies] : inFlight)
        {
            count += copies;
        }
        return count;
    }
};

class Scenario
{
  public:
    explicit Scenario(const json& doc)
        : m_doc(doc)
    {
    }

    void Build();
    void RunIncast();
    void RunWorkload();
    void RunCeiling();

  private:
    struct Flow
    {
        uint32_t sender;
        Ptr<LinuxTcpSocket> socket;
        uint64_t received{0};
        bool done{false};
        double finishedAfter{0};
    };

    struct Serving
    {
        uint64_t owed{0};
        uint32_t requestBytes{0};
        uint64_t perRequest{0}; // what a request asks for: the incast's block, or a workload flow's bytes
    };

    //! One flow of a workload: src sends bytes (0: until the measured time ends) to dst, which asks for
    //! them over a new connection at startS; what arrived, when, and the connection's timeouts.
    struct WorkFlow
    {
        uint32_t src;
        uint32_t dst;
        double startS;
        uint64_t bytes;
        uint64_t received{0};
        uint64_t receivedAtStart{0};
        uint64_t receivedAtEnd{0};
        double connectS{-1};
        double endS{-1};
        uint32_t timeouts{0};
        Ptr<LinuxTcpSocket> socket;
    };

    void BuildLink(const json& link);
    void Route(const json& routes);
    void Trace();
    void OnHostTx(uint32_t host, Ptr<const Packet> p);
    void OnHostRx(Ptr<const Packet> p);
    void OnQueueDrop(QueueStats* q, Ptr<const QueueDiscItem> item);
    void ApplySettings(const json& settings);
    void Serve(uint32_t sender);
    void OnAccept(Ptr<Socket> s, const Address& from);
    void OnServerRecv(Ptr<Socket> s);
    void Push(Ptr<Socket> s);
    Ptr<LinuxTcpSocket> Client(uint32_t sender);
    void ConnectAll(std::function<void()> then);
    void StartRound();
    void Ask(uint32_t flow);
    void OnClientRecv(Ptr<Socket> s);
    void FinishRound();
    void RoundDeadline(uint32_t round);
    void StartWorkFlow(uint32_t index);
    void OnWorkRecv(Ptr<Socket> s);
    void StartWorkMeasuring();
    void StopWorkMeasuring();
    void WorkProgress();
    json Measured(double end);
    void Poll();
    void OpenMeasurement();
    void StartMeasuring();
    void StopMeasuring();
    void Probe();
    void OnEcho(Ptr<Socket> s);
    void OnProbeReply(Ptr<Socket> s);
    void Finish(const std::string& mode, json extra);

    const json& m_doc;
    int64_t m_jiffyUs{4000};
    TypeId m_cc;
    bool m_ecn{false};
    NodeContainer m_nodes;
    std::map<std::string, uint32_t> m_index;      // node name -> index in m_nodes
    std::vector<std::string> m_names;
    std::vector<bool> m_isHost;
    std::map<std::pair<uint32_t, uint32_t>, std::pair<Ptr<NetDevice>, Ipv4Address>> m_ends; // (a, b) -> a's end
    std::unordered_map<uint32_t, uint32_t> m_hostByAddress;
    std::vector<Ipv4Address> m_hostAddress;
    std::vector<HostTable> m_tables;
    std::vector<std::unique_ptr<QueueStats>> m_queues;
    // (src << 32 | dst) -> packets sent and their bytes as a switch counts frames (Ethernet header, no FCS)
    std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>> m_pairSent;
    Account m_account;
    uint64_t m_otherDrops{0};
    uint64_t m_counters[LinuxTcpSocket::kCounters]{};

    // workload
    uint32_t m_receiver{0};
    std::vector<uint32_t> m_senders;
    uint64_t m_block{0};
    bool m_persistent{false};
    uint32_t m_admit{0};    // servers asked at once (0: all), the next as one has sent its block
    uint32_t m_nextFlow{0}; // the next server to ask this round
    double m_gapS{0};
    double m_roundTimeoutS{60};
    uint32_t m_warmupRounds{0};
    uint32_t m_rounds{0};
    uint32_t m_round{0};
    bool m_measuring{false};
    std::vector<Flow> m_flows;
    std::unordered_map<Socket*, uint32_t> m_flowBySocket;
    std::unordered_map<Socket*, Serving> m_serving;
    std::vector<Ptr<Socket>> m_listeners;
    uint32_t m_done{0};
    Time m_roundStart;
    json m_roundRecords = json::array();
    double m_measureStart{0};
    uint64_t m_countersAtStart[LinuxTcpSocket::kCounters]{};
    bool m_finished{false};

    // workload
    std::vector<WorkFlow> m_work;
    std::unordered_map<uint64_t, uint32_t> m_workByClient; // (client address << 16 | port) -> flow
    std::unordered_map<Socket*, uint32_t> m_workBySocket;  // client socket -> flow
    double m_measureEnd{0};
    double m_progressS{0};

    // controller polls (closed loop)
    double m_pollS{0};
    bool m_waitingForPlan{false};
    uint64_t m_polls{0};

    // latency probe
    int64_t m_probeHost{-1};
    double m_probeIntervalS{0.01};
    Ptr<Socket> m_probeSocket;
    Ptr<Socket> m_echoSocket;
    std::unordered_map<uint64_t, Time> m_probeSent;
    uint64_t m_probesSent{0};
    std::vector<double> m_probeRttsMs;
    bool m_probing{false};

    // ceiling
    double m_ceilingS{0};
    uint32_t m_segmentBytes{0}; // the largest segment a connection of the measured time was given
};

void
Scenario::Build()
{
    m_jiffyUs = 1000000 / m_doc.at("hz").get<int64_t>();
    const json& tcp = m_doc.at("tcp");
    m_cc = TypeId::LookupByName(tcp.at("congestion_control").get<std::string>());
    m_ecn = tcp.value("ecn", false);
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(tcp.value("snd_buf_bytes", 4u << 20)));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(tcp.value("rcv_buf_bytes", 6u << 20)));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(2));
    Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(Seconds(kDelayedAckTimeoutS)));
    Config::SetDefault("ns3::TcpSocket::TcpNoDelay", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(1448));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
    // Linux retries a segment 15 times (tcp_retries2) before it gives the connection up; ns-3's default is 6,
    // which an incast's backed-off retransmissions reach within a second at low rates.
    Config::SetDefault("ns3::TcpSocket::DataRetries", UintegerValue(15));
    // RACK marks a segment lost once one sent after it is acknowledged (and a quarter of the minimum
    // RTT passed, for reordering): in these fabrics, which never reorder, a first duplicate ACK.
    Config::SetDefault("ns3::TcpSocketBase::ReTxThreshold", UintegerValue(1));

    for (const auto& name : m_doc.at("switches"))
    {
        m_index[name.get<std::string>()] = m_names.size();
        m_names.push_back(name.get<std::string>());
        m_isHost.push_back(false);
    }
    for (const auto& name : m_doc.at("hosts"))
    {
        m_index[name.get<std::string>()] = m_names.size();
        m_names.push_back(name.get<std::string>());
        m_isHost.push_back(true);
    }
    m_nodes.Create(m_names.size());
    InternetStackHelper stack;
    Ipv4StaticRoutingHelper staticRouting;
    stack.SetRoutingHelper(staticRouting);
    stack.Install(m_nodes);
    m_hostAddress.resize(m_names.size());
    for (const auto& link : m_doc.at("links"))
    {
        BuildLink(link);
    }
    Route(m_doc.at("routes"));
    m_tables.resize(m_names.size());
    ApplySettings(m_doc.at("settings"));
    Trace();
}

void
Scenario::BuildLink(const json& link)
{
    uint32_t a = m_index.at(link.at("a").get<std::string>());
    uint32_t b = m_index.at(link.at("b").get<std::string>());
    PointToPointHelper p2p;
    p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(link.at("rate_bps").get<uint64_t>())));
    p2p.SetChannelAttribute("Delay", TimeValue(Seconds(link.at("delay_s").get<double>())));
    // One packet under the queue disc: the buffer is the queue disc's, not the device's 100 packets.
    p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", QueueSizeValue(QueueSize("1p")));
    NetDeviceContainer devices = p2p.Install(m_nodes.Get(a), m_nodes.Get(b));
    Ipv4Mask mask(~((1u << (32 - link.at("prefix_len").get<uint32_t>())) - 1));
    const uint32_t ends[2] = {a, b};
    const char* addressKeys[2] = {"a_address", "b_address"};
    const char* bufferKeys[2] = {"a_buffer_bytes", "b_buffer_bytes"};
    for (int side = 0; side < 2; ++side)
    {
        uint32_t node = ends[side];
        Ptr<NetDevice> device = devices.Get(side);
        // The queue disc goes on before the address: Ipv4 would otherwise put FqCoDel there.
        TrafficControlHelper tc;
        auto stats = std::make_unique<QueueStats>();
        stats->from = m_names[node];
        stats->to = m_names[ends[1 - side]];
        stats->onSwitch = !m_isHost[node];
        if (!m_isHost[node])
        {
            uint64_t buffer = link.at(bufferKeys[side]).get<uint64_t>();
            QueueSize size(QueueSizeUnit::BYTES, buffer);
            if (m_doc.contains("ecn_k_bytes") && !m_doc.at("ecn_k_bytes").is_null())
            {
                // DCTCP's step marking on the instantaneous queue, as the project's marker does.
                tc.SetRootQueueDisc("otcp::MarkingFifo",
                                    "MaxSize", QueueSizeValue(size),
                                    "KBytes", UintegerValue(m_doc.at("ecn_k_bytes").get<uint32_t>()));
            }
            else
            {
                tc.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", QueueSizeValue(size));
            }
        }
        else
        {
            uint32_t packets = m_doc.at("host_queue_packets").get<uint32_t>();
            tc.SetRootQueueDisc("ns3::FifoQueueDisc",
                                "MaxSize",
                                QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, packets)));
        }
        QueueDiscContainer discs = tc.Install(device);
        Ptr<QueueDisc> disc = discs.Get(0);
        QueueStats* q = stats.get();
        disc->TraceConnectWithoutContext("BytesInQueue", MakeCallback(&QueueStats::Bytes, q));
        disc->TraceConnectWithoutContext("Drop", MakeBoundCallback(+[](Scenario* s, QueueStats* queue,
                                                                         Ptr<const QueueDiscItem> item) {
                                                                         s->OnQueueDrop(queue, item);
                                                                     },
                                                                     this,
                                                                     q));
        disc->TraceConnectWithoutContext(
            "Mark",
            MakeBoundCallback(+[](QueueStats* queue, Ptr<const QueueDiscItem>, const char*) { ++queue->marks; },
                              q));
        m_queues.push_back(std::move(stats));

        Ptr<Ipv4> ipv4 = m_nodes.Get(node)->GetObject<Ipv4>();
        int32_t interface = ipv4->AddInterface(device);
        Ipv4Address address(link.at(addressKeys[side]).get<std::string>().c_str());
        ipv4->AddAddress(interface, Ipv4InterfaceAddress(address, mask));
        ipv4->SetUp(interface);
        m_ends[{node, ends[1 - side]}] = {device, address};
        if (m_isHost[node])
        {
            m_hostAddress[node] = address;
            m_hostByAddress[address.Get()] = node;
        }
    }
}

void
Scenario::Route(const json& routes)
{
    Ipv4StaticRoutingHelper helper;
    for (uint32_t node = 0; node < m_names.size(); ++node)
    {
        Ptr<Ipv4> ipv4 = m_nodes.Get(node)->GetObject<Ipv4>();
        Ptr<Ipv4StaticRouting> table = helper.GetStaticRouting(ipv4);
        if (m_isHost[node])
        {
            for (const auto& [ends, end] : m_ends)
            {
                if (ends.first == node) // a host's one link: everything goes there
                {
                    Ipv4Address gateway = m_ends.at({ends.second, node}).second;
                    table->SetDefaultRoute(gateway, ipv4->GetInterfaceForDevice(end.first));
                }
            }
            continue;
        }
        if (!routes.contains(m_names[node]))
        {
            continue;
        }
        for (const auto& route : routes.at(m_names[node]))
        {
            uint32_t next = m_index.at(route.at("next").get<std::string>());
            auto here = m_ends.find({node, next});
            if (here == m_ends.end())
            {
                Fail("route from " + m_names[node] + " via " + m_names[next] + ": no such link");
            }
            Ipv4Address gateway = m_ends.at({next, node}).second;
            uint32_t length = route.at("prefix_len").get<uint32_t>();
            table->AddNetworkRouteTo(Ipv4Address(route.at("prefix").get<std::string>().c_str()),
                                     Ipv4Mask(length ? ~((1u << (32 - length)) - 1) : 0u),
                                     gateway,
                                     ipv4->GetInterfaceForDevice(here->second.first));
        }
    }
}

void
Scenario::Trace()
{
    // A host's IPv4 layer: what it sends (before its own queue) and what it receives.
    for (uint32_t node = 0; node < m_names.size(); ++node)
    {
        if (!m_isHost[node])
        {
            continue;
        }
        Ptr<Ipv4L3Protocol> ip = m_nodes.Get(node)->GetObject<Ipv4L3Protocol>();
        ip->TraceConnectWithoutContext(
            "Tx",
            MakeBoundCallback(+[](Scenario* s, uint32_t h, Ptr<const Packet> p, Ptr<Ipv4>, uint32_t) {
                s->OnHostTx(h, p);
            },
                              this,
                              node));
        ip->TraceConnectWithoutContext(
            "Rx",
            MakeBoundCallback(+[](Scenario* s, Ptr<const Packet> p, Ptr<Ipv4>, uint32_t) { s->OnHostRx(p); },
                              this));
    }
    // Drops below the queue discs (none expected: the device queue takes one packet when it has room).
    for (uint32_t node = 0; node < m_names.size(); ++node)
    {
        for (uint32_t i = 0; i < m_nodes.Get(node)->GetNDevices(); ++i)
        {
            Ptr<PointToPointNetDevice> device = DynamicCast<PointToPointNetDevice>(m_nodes.Get(node)->GetDevice(i));
            if (device)
            {
                device->GetQueue()->TraceConnectWithoutContext(
                    "Drop",
                    MakeBoundCallback(+[](Scenario* s, Ptr<const Packet> p) {
                        if (s->m_account.Left(p->GetUid()))
                        {
                            ++s->m_otherDrops;
                        }
                    },
                                      this));
            }
        }
    }
}

void
Scenario::OnHostTx(uint32_t host, Ptr<const Packet> p)
{
    Ipv4Header header;
    if (p->PeekHeader(header) == 0)
    {
        return;
    }
    auto destination = m_hostByAddress.find(header.GetDestination().Get());
    if (destination != m_hostByAddress.end())
    {
        auto& sent = m_pairSent[(uint64_t(host) << 32) | destination->second];
        ++sent.first;
        sent.second += p->GetSize() + kEthernetHeaderBytes;
    }
    m_account.Sent(p->GetUid());
}

void
Scenario::OnHostRx(Ptr<const Packet> p)
{
    if (m_account.Left(p->GetUid()))
    {
        ++m_account.delivered;
    }
}

void
Scenario::OnQueueDrop(QueueStats* q, Ptr<const QueueDiscItem> item)
{
    if (m_account.Left(item->GetPacket()->GetUid()))
    {
        ++q->drops;
    }
}

void
Scenario::ApplySettings(const json& settings)
{
    for (const auto& [host, table] : settings.items())
    {
        uint32_t node = m_index.at(host);
        HostTable& t = m_tables[node];
        if (table.contains("default"))
        {
            t.fallback = ParseSettings(table.at("default"), ConnSettings());
        }
        if (table.contains("peers"))
        {
            for (const auto& [peer, values] : table.at("peers").items())
            {
                uint32_t address = m_hostAddress.at(m_index.at(peer)).Get();
                t.peers[address] = ParseSettings(values, t.fallback);
            }
        }
        ++t.generation;
    }
}

// -- the servers (senders) ------------------------------------------------------------------------

void
Scenario::Serve(uint32_t sender)
{
    Ptr<LinuxTcpSocket> listener = LinuxTcpSocket::Make(m_nodes.Get(sender), m_cc, m_ecn, m_jiffyUs, m_counters);
    HostTable* table = &m_tables[sender];
    listener->SetLookups([table](Ipv4Address peer) { return table->Get(peer); },
                         [table](Ipv4Address peer) {
                             ConnSettings s = table->Get(peer);
                             return std::make_pair(table->generation, FollowedSettings{s.clampSegments, s.pacingBps});
                         });
    listener->SetTimeoutSink([this](const Address& from) -> uint32_t* {
        if (m_work.empty())
        {
            return nullptr;
        }
        InetSocketAddress client = InetSocketAddress::ConvertFrom(from);
        auto found = m_workByClient.find(ClientKey(client.GetIpv4(), client.GetPort()));
        return found == m_workByClient.end() ? nullptr : &m_work[found->second].timeouts;
    });
    listener->Bind(InetSocketAddress(Ipv4Address::GetAny(), kWorkloadPort));
    listener->Listen();
    listener->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                MakeCallback(&Scenario::OnAccept, this));
    m_listeners.push_back(listener);
}

void
Scenario::OnAccept(Ptr<Socket> s, const Address& from)
{
    Serving serving{0, 0, m_block};
    if (!m_work.empty())
    {
        InetSocketAddress client = InetSocketAddress::ConvertFrom(from);
        auto found = m_workByClient.find(ClientKey(client.GetIpv4(), client.GetPort()));
        if (found == m_workByClient.end())
        {
            Fail("a connection from no flow of the workload was accepted");
        }
        WorkFlow& flow = m_work[found->second];
        // A long-lived flow's server always has more to send than the measured time can carry.
        serving.perRequest = flow.bytes ? flow.bytes : UINT64_MAX / 4;
    }
    m_serving[PeekPointer(s)] = serving;
    m_segmentBytes = std::max(m_segmentBytes, DynamicCast<LinuxTcpSocket>(s)->SegmentBytes());
    s->SetRecvCallback(MakeCallback(&Scenario::OnServerRecv, this));
    s->SetSendCallback(MakeBoundCallback(+[](Scenario* sc, Ptr<Socket> socket, uint32_t) { sc->Push(socket); },
                                         this));
    s->SetCloseCallbacks(MakeBoundCallback(+[](Scenario* sc, Ptr<Socket> socket) {
                             socket->Close();
                             sc->m_serving.erase(PeekPointer(socket));
                         },
                                           this),
                         MakeBoundCallback(+[](Scenario* sc, Ptr<Socket> socket) {
                             sc->m_serving.erase(PeekPointer(socket));
                         },
                                           this));
}

void
Scenario::OnServerRecv(Ptr<Socket> s)
{
    Serving& serving = m_serving[PeekPointer(s)];
    while (Ptr<Packet> p = s->Recv())
    {
        serving.requestBytes += p->GetSize();
        while (serving.requestBytes >= kRequestBytes)
        {
            serving.requestBytes -= kRequestBytes;
            serving.owed += serving.perRequest;
        }
    }
    Push(s);
}

void
Scenario::Push(Ptr<Socket> s)
{
    auto found = m_serving.find(PeekPointer(s));
    if (found == m_serving.end())
    {
        return;
    }
    Serving& serving = found->second;
    while (serving.owed > 0)
    {
        uint32_t room = s->GetTxAvailable();
        if (room == 0)
        {
            return;
        }
        uint32_t chunk = uint32_t(std::min<uint64_t>({serving.owed, room, 1u << 22}));
        int sent = s->Send(Create<Packet>(chunk));
        if (sent <= 0)
        {
            return;
        }
        serving.owed -= sent;
    }
}

// -- the client (receiver) ------------------------------------------------------------------------

Ptr<LinuxTcpSocket>
Scenario::Client(uint32_t sender)
{
    Ptr<LinuxTcpSocket> socket = LinuxTcpSocket::Make(m_nodes.Get(m_receiver), m_cc, m_ecn, m_jiffyUs, m_counters);
    HostTable* table = &m_tables[m_receiver];
    socket->Apply(table->Get(m_hostAddress[sender]));
    socket->SetRouteLookup([table](Ipv4Address peer) { return table->Get(peer); });
    socket->Bind();
    socket->SetRecvCallback(MakeCallback(&Scenario::OnClientRecv, this));
    return socket;
}

void
Scenario::ConnectAll(std::function<void()> then)
{
    auto pending = std::make_shared<uint32_t>(m_senders.size());
    auto done = std::make_shared<std::function<void()>>(std::move(then));
    for (uint32_t i = 0; i < m_senders.size(); ++i)
    {
        Flow& flow = m_flows[i];
        flow.socket = Client(flow.sender);
        m_flowBySocket[PeekPointer(flow.socket)] = i;
        flow.socket->SetConnectCallback(
            MakeBoundCallback(+[](std::shared_ptr<uint32_t> left, std::shared_ptr<std::function<void()>> next,
                                  Ptr<Socket>) {
                if (--*left == 0)
                {
                    (*next)();
                }
            },
                              pending,
                              done),
            MakeBoundCallback(+[](Ptr<Socket>) { Fail("a persistent connection was refused"); }));
        flow.socket->Connect(InetSocketAddress(m_hostAddress[flow.sender], kWorkloadPort));
    }
}

void
Scenario::StartRound()
{
    m_roundStart = Simulator::Now();
    m_done = 0;
    uint32_t round = ++m_round;
    Simulator::Schedule(Seconds(m_roundTimeoutS), &Scenario::RoundDeadline, this, round);
    for (Flow& flow : m_flows)
    {
        flow.received = 0;
        flow.done = false;
    }
    uint32_t asked = m_admit ? std::min<uint32_t>(m_admit, m_flows.size()) : m_flows.size();
    for (m_nextFlow = 0; m_nextFlow < asked; ++m_nextFlow)
    {
        Ask(m_nextFlow);
    }
}

void
Scenario::Ask(uint32_t i)
{
    Flow& flow = m_flows[i];
    if (m_persistent)
    {
        flow.socket->Send(Create<Packet>(kRequestBytes));
        return;
    }
    // A new connection per request: the request goes out once it is connected.
    m_flowBySocket.erase(PeekPointer(flow.socket));
    flow.socket = Client(flow.sender);
    m_flowBySocket[PeekPointer(flow.socket)] = i;
    flow.socket->SetConnectCallback(
        MakeBoundCallback(+[](Ptr<Socket> s) { s->Send(Create<Packet>(kRequestBytes)); }),
        MakeBoundCallback(+[](Ptr<Socket>) { Fail("a connection was refused"); }));
    flow.socket->Connect(InetSocketAddress(m_hostAddress[flow.sender], kWorkloadPort));
}

void
Scenario::OnClientRecv(Ptr<Socket> s)
{
    auto found = m_flowBySocket.find(PeekPointer(s));
    while (Ptr<Packet> p = s->Recv())
    {
        if (found == m_flowBySocket.end())
        {
            continue;
        }
        Flow& flow = m_flows[found->second];
        flow.received += p->GetSize();
        if (!flow.done && flow.received >= m_block)
        {
            flow.done = true;
            flow.finishedAfter = (Simulator::Now() - m_roundStart).GetSeconds();
            if (!m_persistent)
            {
                s->Close();
            }
            if (m_nextFlow < m_flows.size())
            {
                // After this callback: asking changes m_flowBySocket, which found points into.
                Simulator::ScheduleNow(&Scenario::Ask, this, m_nextFlow++);
            }
            if (++m_done == m_flows.size())
            {
                Simulator::ScheduleNow(&Scenario::FinishRound, this);
            }
        }
    }
}

void
Scenario::RoundDeadline(uint32_t round)
{
    if (round == m_round && m_done < m_flows.size())
    {
        Fail("round " + std::to_string(round) + " did not finish within " + std::to_string(m_roundTimeoutS) +
             " simulated seconds (" + std::to_string(m_flows.size() - m_done) + " flows unfinished)");
    }
}

void
Scenario::FinishRound()
{
    double duration = (Simulator::Now() - m_roundStart).GetSeconds();
    bool warmup = m_round <= m_warmupRounds;
    json flows = json::array();
    for (const Flow& flow : m_flows)
    {
        flows.push_back(flow.finishedAfter);
    }
    json record = {{"event", "round"},
                   {"phase", warmup ? "warmup" : "measured"},
                   {"round", warmup ? m_round : m_round - m_warmupRounds},
                   {"start_s", m_roundStart.GetSeconds()},
                   {"duration_s", duration},
                   {"bytes", m_block * m_flows.size()}};
    Emit(record);
    if (!warmup)
    {
        record.erase("event");
        record.erase("phase");
        record["flows_s"] = flows;
        m_roundRecords.push_back(record);
    }
    if (m_round == m_warmupRounds)
    {
        if (m_pollS > 0)
        {
            m_waitingForPlan = true; // the next poll's plan, then the measured rounds
            return;
        }
        Simulator::Schedule(Seconds(m_gapS), &Scenario::StartMeasuring, this);
        return;
    }
    if (m_round == m_warmupRounds + m_rounds)
    {
        StopMeasuring();
        return;
    }
    Simulator::Schedule(Seconds(m_gapS), &Scenario::StartRound, this);
}

// The measured time starts now, in either mode: the packet account opens, the queues' statistics
// restart and the counters are taken as they stand.
void
Scenario::OpenMeasurement()
{
    m_measuring = true;
    m_account.open = true;
    m_measureStart = Simulator::Now().GetSeconds();
    for (auto& q : m_queues)
    {
        q->Restart();
    }
    // The segment the measured time sends in: of the connections open now (persistent ones, long-lived
    // flows) and of those it makes, not of the warm-up's, which the idle fabric's plan set up.
    m_segmentBytes = 0;
    for (const auto& open : m_serving)
    {
        m_segmentBytes = std::max(m_segmentBytes, dynamic_cast<LinuxTcpSocket*>(open.first)->SegmentBytes());
    }
    std::copy(std::begin(m_counters), std::end(m_counters), std::begin(m_countersAtStart));
}

void
Scenario::StartMeasuring()
{
    OpenMeasurement();
    if (m_probeHost >= 0)
    {
        m_probing = true;
        Probe();
    }
    StartRound();
}

void
Scenario::StopMeasuring()
{
    m_probing = false;
    double end = Simulator::Now().GetSeconds();
    for (auto& q : m_queues)
    {
        q->Bytes(0, q->bytes); // close the time integral at the last round's end
    }
    // Let what is still in flight (ACKs, a delayed ACK, a spurious retransmission) arrive.
    Simulator::Schedule(Seconds(m_doc.at("workload").at("drain_s").get<double>()), [this, end]() {
        json extra = Measured(end);
        extra["rounds"] = m_roundRecords;
        extra["probe_rtts_ms"] = m_probeRttsMs;
        extra["probes_sent"] = m_probesSent;
        Finish("incast", extra);
    });
}

json
Scenario::Measured(double end)
{
    json queues = json::array();
    for (const auto& q : m_queues)
    {
        double span = std::max(end - m_measureStart, 1e-12);
        queues.push_back({{"from", q->from},
                          {"to", q->to},
                          {"switch", q->onSwitch},
                          {"drops", q->drops},
                          {"marks", q->marks},
                          {"peak_bytes", q->peakBytes},
                          {"mean_bytes", q->byteSeconds / span}});
    }
    return {{"queues", queues},
            {"sent", m_account.sent},
            {"delivered", m_account.delivered},
            {"device_drops", m_otherDrops},
            {"unaccounted", m_account.Unaccounted()},
            {"timeouts", m_counters[LinuxTcpSocket::kTimeouts] - m_countersAtStart[LinuxTcpSocket::kTimeouts]},
            {"retransmissions", m_counters[LinuxTcpSocket::kRetransmissions] -
                                    m_countersAtStart[LinuxTcpSocket::kRetransmissions]},
            {"loss_probes", m_counters[LinuxTcpSocket::kLossProbes] - m_countersAtStart[LinuxTcpSocket::kLossProbes]},
            {"delayed_ack_timeouts", m_counters[LinuxTcpSocket::kDelayedAckTimeouts] -
                                         m_countersAtStart[LinuxTcpSocket::kDelayedAckTimeouts]},
            {"duplicate_segments", m_counters[LinuxTcpSocket::kDuplicateSegments] -
                                       m_countersAtStart[LinuxTcpSocket::kDuplicateSegments]},
            {"measured_s", end - m_measureStart},
            {"segment_bytes", m_segmentBytes},
            {"polls", m_polls}};
}

// -- the workload: flows pulled over new connections ------------------------------------------------

void
Scenario::StartWorkFlow(uint32_t index)
{
    WorkFlow& flow = m_work[index];
    Ptr<LinuxTcpSocket> socket = LinuxTcpSocket::Make(m_nodes.Get(flow.dst), m_cc, m_ecn, m_jiffyUs, m_counters);
    HostTable* table = &m_tables[flow.dst];
    socket->Apply(table->Get(m_hostAddress[flow.src]));
    socket->SetRouteLookup([table](Ipv4Address peer) { return table->Get(peer); });
    socket->CountTimeoutsInto(&flow.timeouts);
    if (socket->Bind() != 0)
    {
        Fail("host " + m_names[flow.dst] + " has no free port for flow " + std::to_string(index));
    }
    Address local;
    socket->GetSockName(local);
    uint16_t port = InetSocketAddress::ConvertFrom(local).GetPort();
    // The server knows the flow by its client's address and port: what it asks for is the flow's bytes.
    m_workByClient[ClientKey(m_hostAddress[flow.dst], port)] = index;
    m_workBySocket[PeekPointer(socket)] = index;
    socket->SetRecvCallback(MakeCallback(&Scenario::OnWorkRecv, this));
    socket->SetConnectCallback(MakeBoundCallback(+[](Ptr<Socket> s) { s->Send(Create<Packet>(kRequestBytes)); }),
                               MakeBoundCallback(+[](Ptr<Socket>) { Fail("a connection was refused"); }));
    flow.socket = socket;
    flow.connectS = Simulator::Now().GetSeconds();
    socket->Connect(InetSocketAddress(m_hostAddress[flow.src], kWorkloadPort));
}

void
Scenario::OnWorkRecv(Ptr<Socket> s)
{
    WorkFlow& flow = m_work[m_workBySocket.at(PeekPointer(s))];
    while (Ptr<Packet> p = s->Recv())
    {
        flow.received += p->GetSize();
    }
    if (flow.bytes && flow.endS < 0 && flow.received >= flow.bytes)
    {
        flow.endS = Simulator::Now().GetSeconds();
        s->Close();
    }
}

void
Scenario::StartWorkMeasuring()
{
    OpenMeasurement();
    for (WorkFlow& flow : m_work)
    {
        flow.receivedAtStart = flow.received;
    }
}

void
Scenario::StopWorkMeasuring()
{
    double end = Simulator::Now().GetSeconds();
    for (auto& q : m_queues)
    {
        q->Bytes(0, q->bytes); // close the time integral at the measured time's end
    }
    json queues = Measured(end).at("queues");
    for (WorkFlow& flow : m_work)
    {
        flow.receivedAtEnd = flow.received;
        if (!flow.bytes && flow.socket)
        {
            flow.socket->Close(); // the long-lived flows end with the measured time
        }
    }
    // The flows still running may finish within the drain; the queues are the measured time's.
    Simulator::Schedule(Seconds(m_doc.at("workload").at("drain_s").get<double>()), [this, end, queues]() {
        json flows = json::array();
        for (const WorkFlow& flow : m_work)
        {
            flows.push_back({flow.connectS < 0 ? json(nullptr) : json(flow.connectS),
                             flow.endS < 0 ? json(nullptr) : json(flow.endS),
                             flow.received,
                             flow.receivedAtEnd - flow.receivedAtStart,
                             flow.timeouts});
        }
        json extra = Measured(end);
        extra["queues"] = queues;
        extra["flows"] = flows;
        Finish("workload", extra);
    });
}

void
Scenario::WorkProgress()
{
    if (m_finished)
    {
        return;
    }
    Emit({{"event", "progress"}, {"t", Simulator::Now().GetSeconds()}, {"end", m_measureEnd}});
    Simulator::Schedule(Seconds(m_progressS), &Scenario::WorkProgress, this);
}

// -- the controller's polls -----------------------------------------------------------------------

void
Scenario::Poll()
{
    if (m_finished)
    {
        return;
    }
    ++m_polls;
    json pairs = json::array();
    for (const auto& [key, sent] : m_pairSent)
    {
        pairs.push_back({m_names[key >> 32], m_names[key & 0xffffffffu], sent.first, sent.second});
    }
    Emit({{"event", "poll"}, {"t", Simulator::Now().GetSeconds()}, {"pairs", pairs}});
    std::string line;
    if (!std::getline(std::cin, line))
    {
        Fail("the driver closed standard input at a poll");
    }
    json reply = json::parse(line);
    if (reply.contains("settings"))
    {
        ApplySettings(reply.at("settings"));
    }
    Simulator::Schedule(Seconds(m_pollS), &Scenario::Poll, this);
    if (m_waitingForPlan)
    {
        m_waitingForPlan = false;
        Simulator::ScheduleNow(&Scenario::StartMeasuring, this);
    }
}

// -- the latency probe: a ping-sized UDP echo through the receiver's downlink ---------------------

void
Scenario::Probe()
{
    if (!m_probing)
    {
        return;
    }
    Ptr<Packet> p = Create<Packet>(kProbePayload);
    m_probeSent[p->GetUid()] = Simulator::Now();
    ++m_probesSent;
    m_probeSocket->SendTo(p, 0, InetSocketAddress(m_hostAddress[m_receiver], kEchoPort));
    Simulator::Schedule(Seconds(m_probeIntervalS), &Scenario::Probe, this);
}

void
Scenario::OnEcho(Ptr<Socket> s)
{
    Address from;
    while (Ptr<Packet> p = s->RecvFrom(from))
    {
        s->SendTo(p, 0, from); // the same packet (uid) back
    }
}

void
Scenario::OnProbeReply(Ptr<Socket> s)
{
    while (Ptr<Packet> p = s->Recv())
    {
        auto sent = m_probeSent.find(p->GetUid());
        if (sent != m_probeSent.end())
        {
            m_probeRttsMs.push_back((Simulator::Now() - sent->second).GetSeconds() * 1e3);
            m_probeSent.erase(sent);
        }
    }
}

// -- runs -------------------------------------------------------------------------------------------

void
Scenario::RunIncast()
{
    const json& w = m_doc.at("workload");
    m_receiver = m_index.at(w.at("receiver").get<std::string>());
    for (const auto& name : w.at("senders"))
    {
        m_senders.push_back(m_index.at(name.get<std::string>()));
    }
    m_block = w.at("block_bytes").get<uint64_t>();
    m_persistent = w.at("persistent").get<bool>();
    m_admit = w.contains("admit") && !w.at("admit").is_null() ? w.at("admit").get<uint32_t>() : 0;
    m_gapS = w.at("gap_s").get<double>();
    m_roundTimeoutS = w.at("round_timeout_s").get<double>();
    m_warmupRounds = w.at("warmup_rounds").get<uint32_t>();
    m_rounds = w.at("rounds").get<uint32_t>();
    m_pollS = m_doc.contains("poll_s") && !m_doc.at("poll_s").is_null() ? m_doc.at("poll_s").get<double>() : 0;
    if (w.contains("probe") && !w.at("probe").is_null())
    {
        m_probeHost = m_index.at(w.at("probe").get<std::string>());
        m_probeIntervalS = w.at("probe_interval_s").get<double>();
        m_echoSocket = Socket::CreateSocket(m_nodes.Get(m_receiver), UdpSocketFactory::GetTypeId());
        m_echoSocket->Bind(InetSocketAddress(Ipv4Address::GetAny(), kEchoPort));
        m_echoSocket->SetRecvCallback(MakeCallback(&Scenario::OnEcho, this));
        m_probeSocket = Socket::CreateSocket(m_nodes.Get(m_probeHost), UdpSocketFactory::GetTypeId());
        m_probeSocket->Bind();
        m_probeSocket->SetRecvCallback(MakeCallback(&Scenario::OnProbeReply, this));
    }
    for (uint32_t sender : m_senders)
    {
        Serve(sender);
        m_flows.push_back(Flow{sender});
    }
    auto begin = [this]() {
        if (m_warmupRounds == 0)
        {
            if (m_pollS > 0)
            {
                m_waitingForPlan = true;
                return;
            }
            StartMeasuring();
            return;
        }
        StartRound();
    };
    if (m_pollS > 0)
    {
        Simulator::ScheduleNow(&Scenario::Poll, this); // the first poll primes the controller's counters
    }
    if (m_persistent)
    {
        Simulator::ScheduleNow([this, begin]() { ConnectAll(begin); });
    }
    else
    {
        Simulator::ScheduleNow(begin);
    }
    Simulator::Run();
}

void
Scenario::RunWorkload()
{
    const json& w = m_doc.at("workload");
    m_pollS = m_doc.contains("poll_s") && !m_doc.at("poll_s").is_null() ? m_doc.at("poll_s").get<double>() : 0;
    double measureStart = w.at("measure_start_s").get<double>();
    m_measureEnd = w.at("measure_end_s").get<double>();
    m_progressS = w.at("progress_s").get<double>();
    if (!(measureStart >= 0 && m_measureEnd > measureStart && m_progressS > 0))
    {
        Fail("workload: measure_start_s, measure_end_s and progress_s out of order");
    }
    std::vector<bool> serves(m_names.size(), false);
    m_work.reserve(w.at("flows").size()); // the flows' timeout counters are pointed at: never moved
    for (const auto& f : w.at("flows"))
    {
        uint32_t src = m_index.at(f.at("src").get<std::string>());
        uint32_t dst = m_index.at(f.at("dst").get<std::string>());
        double start = f.at("start_s").get<double>();
        std::string kind = f.at("kind").get<std::string>();
        bool longLived = kind == "background";
        uint64_t bytes = longLived ? 0 : f.at("bytes").get<uint64_t>();
        if (!m_isHost[src] || !m_isHost[dst] || src == dst || !(start >= 0) ||
            (kind != "mix" && kind != "query" && !longLived) || longLived != f.at("bytes").is_null() ||
            (!longLived && bytes == 0))
        {
            Fail("workload: a bad flow: " + f.dump());
        }
        m_work.push_back(WorkFlow{src, dst, start, bytes});
        if (!serves[src])
        {
            serves[src] = true;
            Serve(src);
        }
    }
    for (uint32_t i = 0; i < m_work.size(); ++i)
    {
        Simulator::Schedule(Seconds(m_work[i].startS), &Scenario::StartWorkFlow, this, i);
    }
    if (m_pollS > 0)
    {
        Simulator::ScheduleNow(&Scenario::Poll, this); // the first poll: the idle fabric's plan
    }
    Simulator::Schedule(Seconds(measureStart), &Scenario::StartWorkMeasuring, this);
    Simulator::Schedule(Seconds(m_measureEnd), &Scenario::StopWorkMeasuring, this);
    Simulator::ScheduleNow(&Scenario::WorkProgress, this);
    Simulator::Run();
}

void
Scenario::RunCeiling()
{
    const json& c = m_doc.at("ceiling");
    m_receiver = m_index.at(c.at("receiver").get<std::string>());
    uint32_t sender = m_index.at(c.at("sender").get<std::string>());
    m_ceilingS = c.at("seconds").get<double>();
    m_block = UINT64_MAX / 4; // more than the flow can send: it sends for the whole measurement
    m_persistent = true;
    m_senders = {sender};
    m_flows.push_back(Flow{sender});
    Serve(sender);
    Simulator::ScheduleNow([this]() {
        ConnectAll([this]() {
            m_roundStart = Simulator::Now();
            m_flows[0].socket->Send(Create<Packet>(kRequestBytes));
            Simulator::Schedule(Seconds(m_ceilingS), [this]() {
                json extra = {{"bytes", m_flows[0].received}, {"seconds", m_ceilingS}};
                Finish("ceiling", extra);
            });
        });
    });
    Simulator::Run();
}

void
Scenario::Finish(const std::string& mode, json extra)
{
    m_finished = true;
    extra["event"] = "result";
    extra["mode"] = mode;
    extra["sim_s"] = Simulator::Now().GetSeconds();
    extra["events"] = Simulator::GetEventCount();
    Emit(extra);
    Simulator::Stop();
}

} // namespace otcp

namespace
{

//! "rto-model": LinuxRtt on RTT samples [rtt_us, snd_una, snd_nxt], the RTO after each.
void
RunRtoModel(const json& doc)
{
    auto rtt = ns3::CreateObject<otcp::LinuxRtt>();
    rtt->Configure(doc.at("rto_min_us").get<int64_t>(), 1000000 / doc.at("hz").get<int64_t>());
    json steps = json::array();
    steps.push_back({{"srtt_us", rtt->SrttUs()}, {"rttvar_us", rtt->RttvarUs()}, {"rto_us", rtt->RtoUs()}});
    for (const auto& sample : doc.at("samples"))
    {
        rtt->SetSequence(sample.at(1).get<uint32_t>(), sample.at(2).get<uint32_t>());
        rtt->Measurement(ns3::MicroSeconds(sample.at(0).get<int64_t>()));
        // What ns-3's TcpSocketBase computes from the estimator, with G = 0 and MinRto = 0.
        ns3::Time rto = rtt->GetEstimate() + rtt->GetVariation() * 4;
        steps.push_back({{"srtt_us", rtt->SrttUs()},
                         {"rttvar_us", rtt->RttvarUs()},
                         {"rto_us", rtt->RtoUs()},
                         {"ns3_rto_ns", rto.GetNanoSeconds()}});
    }
    otcp::Emit({{"event", "result"}, {"mode", "rto-model"}, {"steps", steps}});
}

} // namespace

int
main(int argc, char** argv)
{
    std::string line;
    if (!std::getline(std::cin, line))
    {
        otcp::Fail("expected the scenario as one JSON line on standard input");
    }
    json doc;
    try
    {
        doc = json::parse(line);
    }
    catch (const json::exception& e)
    {
        otcp::Fail(std::string("the scenario is not JSON: ") + e.what());
    }
    auto wallStart = std::chrono::steady_clock::now();
    std::clock_t cpuStart = std::clock();
    try
    {
        ns3::RngSeedManager::SetSeed(doc.value("seed", 1));
        std::string mode = doc.at("mode").get<std::string>();
        if (mode == "rto-model")
        {
            RunRtoModel(doc);
        }
        else if (mode == "longpath")
        {
            otcp::LongPathRun run(doc);
            json result = run.Run();
            result["event"] = "result";
            result["mode"] = mode;
            result["events"] = ns3::Simulator::GetEventCount();
            otcp::Emit(result);
        }
        else if (mode == "incast" || mode == "workload" || mode == "ceiling")
        {
            otcp::Scenario scenario(doc);
            scenario.Build();
            if (mode == "incast")
            {
                scenario.RunIncast();
            }
            else if (mode == "workload")
            {
                scenario.RunWorkload();
            }
            else
            {
                scenario.RunCeiling();
            }
        }
        else
        {
            otcp::Fail("unknown mode " + mode);
        }
    }
    catch (const json::exception& e)
    {
        otcp::Fail(std::string("bad scenario: ") + e.what());
    }
    catch (const std::runtime_error& e)
    {
        otcp::Fail(std::string("bad scenario: ") + e.what());
    }
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wallStart).count();
    otcp::Emit({{"event", "cost"},
                {"wall_s", wall},
                {"cpu_s", double(std::clock() - cpuStart) / CLOCKS_PER_SEC},
                {"max_rss_kb", usage.ru_maxrss}});
    ns3::Simulator::Destroy();
    return 0;
}
