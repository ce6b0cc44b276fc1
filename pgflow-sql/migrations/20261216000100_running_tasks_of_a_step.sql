-- run_step_states says how many of a step's tasks a worker holds now (running_tasks), so that
-- readers show a step whose tasks all wait (unclaimed yet, or back in the queue after a snooze
-- or before a retry) as queued. A return type cannot change in place: the old function is
-- dropped here, and the function file creates the new one.

drop function if exists pgflow.run_step_states(uuid);
