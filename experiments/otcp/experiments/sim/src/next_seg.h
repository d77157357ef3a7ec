// ns-3's TcpTxBuffer::NextSeg without its idle scan of the sent list, where the scenario asks for it.
//
// NextSeg (RFC 6675) is asked for the next segment every time TcpSocketBase sends one. Its rule 1
// walks the whole sent list for a segment marked lost, even when none is: with W segments in flight
// every segment sent costs O(W), so a bulk flow's cost per simulated second grows with rate x window
// (perf: NextSeg is three quarters of the CPU of a 1 Gb/s x 120 ms run, and a 2.5 Gb/s x 200 ms run
// would take CPU hours). When no byte is marked lost (m_lostOut counts the bytes of the segments that
// are) and rule 3 is not asked for (isRecovery false), the walk can find nothing; ns-3's own NextSeg
// then answers with the sent list set aside for the call (rules 2 and 4 do not read it: they read
// the buffer's sizes and the receiver's window), so its answer is the same. Every other call is
// ns-3's own, unchanged.
//
// This definition replaces the library's by symbol interposition: libns3-internet calls NextSeg
// through its procedure linkage table, and the program's definition comes first. ns-3's own is
// found with dlsym(RTLD_NEXT). Off unless a scenario turns it on (SetSkipIdleLostScan).
#pragma once

#include "ns3/tcp-tx-buffer.h"

#include <dlfcn.h>
#include <stdexcept>

namespace otcp
{
//! Whether NextSeg skips the scan when nothing is marked lost (set from the scenario).
inline bool gSkipIdleLostScan = false;

inline void
SetSkipIdleLostScan(bool on)
{
    gSkipIdleLostScan = on;
}
} // namespace otcp

namespace ns3
{
bool
TcpTxBuffer::NextSeg(SequenceNumber32* seq, SequenceNumber32* seqHigh, bool isRecovery) const
{
    using Original = bool (*)(const TcpTxBuffer*, SequenceNumber32*, SequenceNumber32*, bool);
    static const Original original = []() {
        void* found = dlsym(RTLD_NEXT, "_ZNK3ns311TcpTxBuffer7NextSegEPNS_14SequenceNumberIjiEES3_b");
        if (found == nullptr)
        {
            throw std::runtime_error("ns-3's TcpTxBuffer::NextSeg is not in its library");
        }
        return reinterpret_cast<Original>(found);
    }();
    if (!otcp::gSkipIdleLostScan || m_lostOut != 0 || isRecovery)
    {
        return original(this, seq, seqHigh, isRecovery);
    }
    // Nothing is marked lost: the sent list is set aside (an O(1) swap) while ns-3 answers.
    auto& sent = const_cast<PacketList&>(m_sentList);
    PacketList aside;
    aside.swap(sent);
    bool found = original(this, seq, seqHigh, isRecovery);
    sent.swap(aside);
    return found;
}
} // namespace ns3
