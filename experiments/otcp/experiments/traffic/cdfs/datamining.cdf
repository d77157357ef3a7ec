# Data mining: the sizes of the flows measured in a 1500-server cluster running data mining (MapReduce
# style) jobs.
# Source: A. Greenberg, J. R. Hamilton, N. Jain, S. Kandula, C. Kim, P. Lahiri, D. A. Maltz, P. Patel,
# S. Sengupta, "VL2: A Scalable and Flexible Data Center Network", ACM SIGCOMM 2009, Figure 2 (flow
# size distribution).
# The points are those of the figure as pFabric (M. Alizadeh et al., "pFabric: Minimal Near-Optimal
# Datacenter Transport", ACM SIGCOMM 2013) read it for its "data mining" workload, used since by PIAS,
# Homa and others: there in 1460-byte packets, here in bytes (packets x 1460).
# The distribution is piecewise linear between the points; the first point's fraction is the share of
# flows of exactly its size. Mean: 7.47 MB; half of the flows are one packet, and flows of 100 MB and
# more carry most of the bytes.
#
# size_bytes  cumulative_fraction
1460 0.50
2920 0.60
4380 0.70
10220 0.80
389820 0.90
3076220 0.95
97333820 0.99
973333820 1.00
