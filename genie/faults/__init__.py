"""Link faults during a run: one package for the whole path.

* ``schedule``: parse a schedule and resolve it on a testbed (pure: the ``tc``/``ip`` commands);
* ``lab_plan``: the same for lab hosts (pure: the shell text sent over SSH);
* ``netns``: apply a plan in a netns testbed while a run goes on, and restore it;
* ``lab``: apply a lab plan over the deploy SSH, each fault carrying its own restore;
* ``run``: resolve ``--faults``, pick the scheduler, widen the controller's timeouts;
* ``effect``: each fault's window on the run's timeline and what it did to the iterations.
"""
