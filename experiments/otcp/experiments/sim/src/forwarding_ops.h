// The base of the scenario program's congestion-control wrappers (ClampOps in linux_tcp.h,
// InitialSsthreshOps in long_path.h): every hook goes to the wrapped ns-3 algorithm, and a wrapper
// overrides only what it changes. A copy (Fork) wraps a fork of the wrapped algorithm.
#pragma once

#include "ns3/core-module.h"
#include "ns3/internet-module.h"

#include <string>

namespace otcp
{
using namespace ns3;

class ForwardingOps : public TcpCongestionOps
{
  public:
    ForwardingOps() = default;

    ForwardingOps(const ForwardingOps& other)
        : TcpCongestionOps(other),
          m_inner(other.m_inner ? other.m_inner->Fork() : nullptr)
    {
    }

    std::string GetName() const override { return m_inner->GetName(); }

    void Init(Ptr<TcpSocketState> tcb) override { m_inner->Init(tcb); } // TcpDctcp turns ECN on here

    uint32_t GetSsThresh(Ptr<const TcpSocketState> tcb, uint32_t bytesInFlight) override
    {
        return m_inner->GetSsThresh(tcb, bytesInFlight);
    }

    void IncreaseWindow(Ptr<TcpSocketState> tcb, uint32_t segmentsAcked) override
    {
        m_inner->IncreaseWindow(tcb, segmentsAcked);
    }

    void PktsAcked(Ptr<TcpSocketState> tcb, uint32_t segmentsAcked, const Time& rtt) override
    {
        m_inner->PktsAcked(tcb, segmentsAcked, rtt);
    }

    void CongestionStateSet(Ptr<TcpSocketState> tcb, const TcpSocketState::TcpCongState_t state) override
    {
        m_inner->CongestionStateSet(tcb, state);
    }

    void CwndEvent(Ptr<TcpSocketState> tcb, const TcpSocketState::TcpCAEvent_t event) override
    {
        m_inner->CwndEvent(tcb, event);
    }

    bool HasCongControl() const override { return m_inner->HasCongControl(); }

    void CongControl(Ptr<TcpSocketState> tcb,
                     const TcpRateOps::TcpRateConnection& rc,
                     const TcpRateOps::TcpRateSample& rs) override
    {
        m_inner->CongControl(tcb, rc, rs);
    }

  protected:
    Ptr<TcpCongestionOps> m_inner;
};

} // namespace otcp
