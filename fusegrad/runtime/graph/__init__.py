"""Device graphs: GraphRunner subclasses that replay a TinyJit batch as one launch, one module per backend family
(the reference's `runtime/graph/` layout). `cpu.CPUGraph` is CPU's and `null.NullGraph` NULL's; `hcq.HCQGraph` names
the reference's graph for hardware-command-queue devices, which fusegrad does not have. They sit above
`engine.graph`, whose `GraphRunner` they extend; a device names its class as `Compiled.graph` and imports it when it
opens.
"""
