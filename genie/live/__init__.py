"""Hardware in the loop: a workload's communication run on the live testbed's agents.

Planning (``plan``, pure) is apart from running (``run``, through the controller's public
API); ``backends`` turn what the wire measured into the replay's network.

Two modes behind ``genie emulate``:

* **overlapped** (default): ``compile_oplists`` plans every communication instance of the trace
  as a step program of its own and gives each rank its op list (``genie_agent.oplist``): the ops in
  order, each with the earlier ops it depends on and the compute gap before it, taken from a
  replay on a network where communication costs nothing (gap = the op's arrival minus the
  zero-cost end of its latest communication ancestor, or its arrival when it has none). One Go
  per run ships every agent its ranks' lists and a common start; agents run them with no
  controller on the critical path, several collectives in flight at once, so collectives that
  overlap in the trace overlap on the wire. Per op start/end come back on the controller clock;
  an instance's time is from its last member's arrival to its last rank's end (the simulator
  starts an instance when every member has arrived), and ``InstanceBackend`` replays the
  workload with those measured times. What is approximate: compute gaps are fixed by the
  zero-cost replay, so a compute stream congested differently because communication took
  longer is not re-simulated (each op still waits for its real dependencies).
* **isolated**: ``distinct_transfers`` groups the instances by (collective, size, group), runs
  each alone (warm-up plus ``iterations``), and ``TestbedBackend`` replays with each instance
  taking the median of its own group; exact when nothing overlaps; when collectives overlap in
  the trace, the replay shares links between them as the analytical model does, scaled to the
  measured standalone times.
"""
