-- A coverage gap names the alias whose active target needs the pair (`active_alias`) instead
-- of only saying that one does, so a worker's startup error can give the reason and the right
-- repair. The return type changes: the old function is dropped here and the functions file
-- creates the new one.

drop function if exists pgflow.queue_coverage_gaps(text, text[], text[]);
