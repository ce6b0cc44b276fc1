-- Input checks: whether a flow input fits the JSON Schema its flow recorded
-- (`pgflow.flows.input_schema`, written by `#[flow(check_input)]` from the Rust input type
-- through schemars). start_flows (05_starts.sql) calls input_misfit for each input of a flow
-- that has a schema and refuses the start with PF014 when one does not fit.
--
-- These functions read the keywords a Rust type's schema is made of: `type`, `enum`, `const`,
-- `$ref` (to `#/...` in the same document), `properties`, `required`, `additionalProperties`,
-- `items`, `prefixItems`, `minItems`, `maxItems`, `anyOf`, `oneOf`, `allOf`, `minimum`,
-- `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `minLength` and `maxLength`. Any other
-- keyword (`format`, `pattern`, ...) is not checked: a value it would refuse is let through,
-- and the step's own decoding still refuses it (a permanent failure naming the field). No
-- value of the input is ever written into a misfit: only its place, its JSON type and what the
-- schema expected there.

-- schema_description: a short name for what p_schema accepts ("integer", "string or null",
-- "Address", "one of \"low\", \"high\""), for misfit texts.
create or replace function pgflow.schema_description(p_schema jsonb)
returns text
language plpgsql
immutable
as $$
begin
  return case
    when p_schema is null or p_schema = 'true'::jsonb then 'any value'
    when p_schema = 'false'::jsonb then 'no value'
    when jsonb_typeof(p_schema) <> 'object' then 'any value'
    when p_schema ? '$ref' then regexp_replace(p_schema ->> '$ref', '^.*/', '')
    when p_schema ? 'const' then (p_schema -> 'const')::text
    when jsonb_typeof(p_schema -> 'enum') = 'array' then
      'one of ' || (select string_agg(e::text, ', ')
                    from jsonb_array_elements(p_schema -> 'enum') e)
    when jsonb_typeof(p_schema -> 'type') = 'array' then
      (select string_agg(t, ' or ') from jsonb_array_elements_text(p_schema -> 'type') t)
    when p_schema ? 'type' then p_schema ->> 'type'
    when jsonb_typeof(coalesce(p_schema -> 'anyOf', p_schema -> 'oneOf')) = 'array' then
      (select string_agg(pgflow.schema_description(a), ' or ')
       from jsonb_array_elements(coalesce(p_schema -> 'anyOf', p_schema -> 'oneOf')) a)
    else 'any value'
  end;
end;
$$;

-- value_kind: the JSON type of p_value as a misfit names it ("string", "integer", "number",
-- "object", ...); never the value.
create or replace function pgflow.value_kind(p_value jsonb)
returns text
language sql
immutable
as $$
  select case
    when jsonb_typeof(p_value) = 'number' and (p_value #>> '{}')::numeric % 1 = 0 then 'integer'
    when jsonb_typeof(p_value) = 'number' then 'a number with a fraction'
    else coalesce(jsonb_typeof(p_value), 'nothing')
  end
$$;

-- schema_misfit: the first place at or below p_path where p_value does not fit p_schema (a
-- schema inside the document p_root), as {"path": text, "problem": text}, or null when it
-- fits. Paths read as in Rust code: `thread.subject`, `items[2].sku`; the top level is ''.
create or replace function pgflow.schema_misfit(
  p_root jsonb,
  p_schema jsonb,
  p_value jsonb,
  p_path text
)
returns jsonb
language plpgsql
immutable
as $$
declare
  v_kind text := pgflow.value_kind(p_value);
  v_type text := jsonb_typeof(p_value);
  v_types jsonb;
  v_misfit jsonb;
  v_deeper jsonb[];
  v_alternative jsonb;
  v_key text;
  v_element jsonb;
  v_index integer;
  v_number numeric;
  v_length integer;
begin
  if p_schema is null or p_schema = 'true'::jsonb or jsonb_typeof(p_schema) <> 'object' then
    if p_schema = 'false'::jsonb then
      return jsonb_build_object('path', p_path, 'problem', 'no value is allowed here');
    end if;
    return null;
  end if;

  if p_schema ? '$ref' and (p_schema ->> '$ref') like '#/%' then
    v_misfit := pgflow.schema_misfit(
      p_root,
      p_root #> (select array_agg(replace(replace(part, '~1', '/'), '~0', '~') order by n)
                 from unnest(string_to_array(substr(p_schema ->> '$ref', 3), '/'))
                   with ordinality as parts(part, n)),
      p_value, p_path);
    if v_misfit is not null then
      return v_misfit;
    end if;
  end if;

  if p_schema ? 'type' then
    v_types := case when jsonb_typeof(p_schema -> 'type') = 'array' then p_schema -> 'type'
                    else jsonb_build_array(p_schema -> 'type') end;
    if not (v_types ? v_type or (v_kind = 'integer' and v_types ? 'integer')) then
      return jsonb_build_object('path', p_path, 'problem', format('expected %s, found %s',
        pgflow.schema_description(p_schema - 'enum' - 'const'), v_kind));
    end if;
  end if;

  if p_schema ? 'const' and p_value is distinct from p_schema -> 'const' then
    return jsonb_build_object('path', p_path, 'problem',
      format('expected %s', (p_schema -> 'const')::text));
  end if;
  if jsonb_typeof(p_schema -> 'enum') = 'array'
     and not exists (select 1 from jsonb_array_elements(p_schema -> 'enum') e where e = p_value)
  then
    return jsonb_build_object('path', p_path, 'problem',
      format('expected %s, found another %s', pgflow.schema_description(p_schema - 'type'),
             v_kind));
  end if;

  if v_type = 'number' then
    v_number := (p_value #>> '{}')::numeric;
    if (p_schema -> 'minimum') is not null and v_number < (p_schema ->> 'minimum')::numeric then
      return jsonb_build_object('path', p_path, 'problem',
        format('expected at least %s, found a smaller number', p_schema ->> 'minimum'));
    end if;
    if (p_schema -> 'maximum') is not null and v_number > (p_schema ->> 'maximum')::numeric then
      return jsonb_build_object('path', p_path, 'problem',
        format('expected at most %s, found a larger number', p_schema ->> 'maximum'));
    end if;
    if jsonb_typeof(p_schema -> 'exclusiveMinimum') = 'number'
       and v_number <= (p_schema ->> 'exclusiveMinimum')::numeric then
      return jsonb_build_object('path', p_path, 'problem',
        format('expected more than %s', p_schema ->> 'exclusiveMinimum'));
    end if;
    if jsonb_typeof(p_schema -> 'exclusiveMaximum') = 'number'
       and v_number >= (p_schema ->> 'exclusiveMaximum')::numeric then
      return jsonb_build_object('path', p_path, 'problem',
        format('expected less than %s', p_schema ->> 'exclusiveMaximum'));
    end if;
  end if;

  if v_type = 'string' then
    v_length := length(p_value #>> '{}');
    if (p_schema -> 'minLength') is not null and v_length < (p_schema ->> 'minLength')::integer
    then
      return jsonb_build_object('path', p_path, 'problem',
        format('expected a string of at least %s characters, found %s',
               p_schema ->> 'minLength', v_length));
    end if;
    if (p_schema -> 'maxLength') is not null and v_length > (p_schema ->> 'maxLength')::integer
    then
      return jsonb_build_object('path', p_path, 'problem',
        format('expected a string of at most %s characters, found %s',
               p_schema ->> 'maxLength', v_length));
    end if;
  end if;

  if v_type = 'object' then
    for v_key in
      select r.key from jsonb_array_elements_text(
        case when jsonb_typeof(p_schema -> 'required') = 'array' then p_schema -> 'required'
             else '[]'::jsonb end) r(key)
      where not p_value ? r.key
    loop
      return jsonb_build_object('path', pgflow.field_path(p_path, v_key), 'problem',
        format('missing; the field is required (%s)',
               pgflow.schema_description(p_schema -> 'properties' -> v_key)));
    end loop;
    for v_key, v_element in select e.key, e.value from jsonb_each(p_value) e order by e.key loop
      if p_schema -> 'properties' ? v_key then
        v_misfit := pgflow.schema_misfit(p_root, p_schema -> 'properties' -> v_key, v_element,
                                         pgflow.field_path(p_path, v_key));
      elsif p_schema -> 'additionalProperties' = 'false'::jsonb then
        return jsonb_build_object('path', pgflow.field_path(p_path, v_key), 'problem',
          format('not a field of this type (it has %s)',
                 coalesce((select string_agg(format('`%s`', k), ', ' order by k)
                           from jsonb_object_keys(p_schema -> 'properties') k),
                          'no fields')));
      else
        v_misfit := pgflow.schema_misfit(p_root, p_schema -> 'additionalProperties',
                                         v_element, pgflow.field_path(p_path, v_key));
      end if;
      if v_misfit is not null then
        return v_misfit;
      end if;
    end loop;
  end if;

  if v_type = 'array' then
    v_length := jsonb_array_length(p_value);
    if (p_schema -> 'minItems') is not null and v_length < (p_schema ->> 'minItems')::integer
    then
      return jsonb_build_object('path', p_path, 'problem',
        format('expected at least %s elements, found %s', p_schema ->> 'minItems', v_length));
    end if;
    if (p_schema -> 'maxItems') is not null and v_length > (p_schema ->> 'maxItems')::integer
    then
      return jsonb_build_object('path', p_path, 'problem',
        format('expected at most %s elements, found %s', p_schema ->> 'maxItems', v_length));
    end if;
    for v_element, v_index in
      select e.value, (e.n - 1)::integer from jsonb_array_elements(p_value) with ordinality e(value, n)
    loop
      v_misfit := pgflow.schema_misfit(
        p_root,
        case when jsonb_typeof(p_schema -> 'prefixItems') = 'array'
                  and v_index < jsonb_array_length(p_schema -> 'prefixItems')
             then p_schema -> 'prefixItems' -> v_index
             else p_schema -> 'items' end,
        v_element, format('%s[%s]', p_path, v_index));
      if v_misfit is not null then
        return v_misfit;
      end if;
    end loop;
  end if;

  if jsonb_typeof(p_schema -> 'allOf') = 'array' then
    for v_alternative in select a from jsonb_array_elements(p_schema -> 'allOf') a loop
      v_misfit := pgflow.schema_misfit(p_root, v_alternative, p_value, p_path);
      if v_misfit is not null then
        return v_misfit;
      end if;
    end loop;
  end if;

  -- Alternatives (an Option<T>, an enum's variants): the value fits when one of them fits.
  -- When none does and exactly one went deeper than this place (its type matched), that
  -- one's misfit is the useful one to name.
  if jsonb_typeof(coalesce(p_schema -> 'anyOf', p_schema -> 'oneOf')) = 'array' then
    v_deeper := array[]::jsonb[];
    for v_alternative in
      select a from jsonb_array_elements(coalesce(p_schema -> 'anyOf', p_schema -> 'oneOf')) a
    loop
      v_misfit := pgflow.schema_misfit(p_root, v_alternative, p_value, p_path);
      if v_misfit is null then
        return null;
      end if;
      if v_misfit ->> 'path' <> p_path then
        v_deeper := v_deeper || v_misfit;
      end if;
    end loop;
    if cardinality(v_deeper) = 1 then
      return v_deeper[1];
    end if;
    return jsonb_build_object('path', p_path, 'problem', format('expected %s, found %s',
      pgflow.schema_description(jsonb_build_object(
        'anyOf', coalesce(p_schema -> 'anyOf', p_schema -> 'oneOf'))),
      v_kind));
  end if;

  return null;
end;
$$;

-- field_path: p_path extended by the field p_key (`thread` at the top, `thread.subject` below).
create or replace function pgflow.field_path(p_path text, p_key text)
returns text
language sql
immutable
as $$
  select case when p_path = '' then p_key else p_path || '.' || p_key end
$$;

-- input_misfit: where the flow input p_input does not fit the JSON Schema p_schema, as
-- {"path", "problem"}, or null when it fits (or when there is no schema).
create or replace function pgflow.input_misfit(p_schema jsonb, p_input jsonb)
returns jsonb
language sql
immutable
as $$
  select case when p_schema is not null
              then pgflow.schema_misfit(p_schema, p_schema, p_input, '') end
$$;
