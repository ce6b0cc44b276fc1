-- Events by key (issue 37): a step that waits for a signal may also be reached by a key taken
-- from its run (the flow input or a dependency's output, at the path signal_key_path, whose
-- first element is `input` or the dependency's slug). The key is read when the step begins to
-- wait and kept on its wait; pgflow.emit_events delivers an event to every run waiting for
-- that (name, key), in one statement.

alter table pgflow.steps
  add column signal_key_path text[]
    constraint steps_signal_key_path_valid
      check (signal_key_path is null or (signal_name is not null
                                         and cardinality(signal_key_path) >= 1));

alter table pgflow.waits add column signal_key text;
create index waits_signal_key_idx on pgflow.waits (signal_name, signal_key)
  where signal_key is not null;
