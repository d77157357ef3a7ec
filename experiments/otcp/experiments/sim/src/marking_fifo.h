// MarkingFifo: a drop-tail switch egress that marks CE, as the project's ECN marker does
// (otcp/bpf/src/otcp_mark.bpf.c): a packet that arrives while the queue holds more than K bytes is
// marked if it is ECN-capable (DCTCP's step marking on the instantaneous queue); a packet that is
// not is left alone, and dropped only when the buffer is full. (ns-3's RedQueueDisc drops packets
// that are not ECN-capable above its threshold: pure ACKs, SYNs, the probe's pings.)
#pragma once

#include "ns3/core-module.h"
#include "ns3/traffic-control-module.h"

namespace otcp
{
using namespace ns3;

class MarkingFifo : public QueueDisc
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid =
            TypeId("otcp::MarkingFifo")
                .SetParent<QueueDisc>()
                .AddConstructor<MarkingFifo>()
                .AddAttribute("MaxSize",
                              "The buffer",
                              QueueSizeValue(QueueSize("1000p")),
                              MakeQueueSizeAccessor(&QueueDisc::SetMaxSize, &QueueDisc::GetMaxSize),
                              MakeQueueSizeChecker())
                .AddAttribute("KBytes",
                              "The marking threshold K in bytes",
                              UintegerValue(0),
                              MakeUintegerAccessor(&MarkingFifo::m_kBytes),
                              MakeUintegerChecker<uint32_t>());
        return tid;
    }

    MarkingFifo()
        : QueueDisc(QueueDiscSizePolicy::SINGLE_INTERNAL_QUEUE)
    {
    }

  private:
    bool DoEnqueue(Ptr<QueueDiscItem> item) override
    {
        if (GetCurrentSize() + item > GetMaxSize())
        {
            DropBeforeEnqueue(item, "Buffer full");
            return false;
        }
        if (GetNBytes() > m_kBytes)
        {
            Mark(item, "Queue over K"); // a no-op for a packet that is not ECN-capable
        }
        return GetInternalQueue(0)->Enqueue(item);
    }

    Ptr<QueueDiscItem> DoDequeue() override { return GetInternalQueue(0)->Dequeue(); }

    bool CheckConfig() override
    {
        if (GetNQueueDiscClasses() > 0 || GetNPacketFilters() > 0)
        {
            return false;
        }
        if (GetNInternalQueues() == 0)
        {
            AddInternalQueue(CreateObjectWithAttributes<DropTailQueue<QueueDiscItem>>(
                "MaxSize", QueueSizeValue(GetMaxSize())));
        }
        return GetNInternalQueues() == 1;
    }

    void InitializeParams() override {}

    uint32_t m_kBytes{0};
};

} // namespace otcp
