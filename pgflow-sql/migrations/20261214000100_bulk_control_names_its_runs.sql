-- Bulk run control names its runs: cancel_matching and retry_matching return the runs they
-- changed (or, in a dry run, would change) instead of a count, and resume_matching each run with
-- the run it was resumed as. A return type cannot change in place: the old functions are
-- dropped here, and the function file creates the new ones.

drop function if exists pgflow.cancel_matching(text, timestamptz, text, integer, boolean);
drop function if exists pgflow.retry_matching(text, timestamptz, integer, boolean);
drop function if exists pgflow.resume_matching(text, text, text[], timestamptz, integer, boolean);
