"""The live controller core: what the controller knows of the fabric (switches,
links, hosts, delays, flows, round trips), the policy that turns it into
forwarding entries and parameter generations, and the store. Its methods take
``now`` and plain data and return actions; nothing here reads a clock, opens a
socket or imports os-ken's event machinery."""
