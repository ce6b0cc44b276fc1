-- The catalog of schema pgflow as (kind, name, definition) rows, for comparing two installs.
-- Leaves out pgflow.schema_migrations (the installer's ledger, compared by the test itself)
-- and column positions (a column added by a migration comes last, in a fresh install anywhere).
with rels as (
  select c.oid, c.relname, c.relkind, c.reloptions
  from pg_class c
  where c.relnamespace = 'pgflow'::regnamespace
    and c.relname <> 'schema_migrations'
)
select kind, name, definition
from (
  -- tables, views, sequences and their storage options
  select 'relation' as kind, r.relname::text as name,
         format('relkind=%s reloptions=%s', r.relkind,
                coalesce(array_to_string(r.reloptions, ','), '')) as definition
  from rels r
  where r.relkind in ('r', 'p', 'v', 'm', 'S', 'f')
  union all
  -- sequence parameters (identity columns)
  select 'sequence', r.relname::text,
         format('type=%s start=%s increment=%s min=%s max=%s cache=%s cycle=%s',
                format_type(s.seqtypid, null), s.seqstart, s.seqincrement, s.seqmin,
                s.seqmax, s.seqcache, s.seqcycle)
  from rels r
  join pg_sequence s on s.seqrelid = r.oid
  union all
  -- columns of tables and views (not their position)
  select 'column', r.relname || '.' || a.attname,
         format('%s%s%s%s%s', format_type(a.atttypid, a.atttypmod),
                case when a.attnotnull then ' not null' else '' end,
                coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), ''),
                case a.attidentity when 'a' then ' identity always'
                                   when 'd' then ' identity by default' else '' end,
                case a.attgenerated when 's' then ' generated stored' else '' end)
  from rels r
  join pg_attribute a on a.attrelid = r.oid and a.attnum > 0 and not a.attisdropped
  left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
  where r.relkind in ('r', 'p', 'v', 'm', 'f')
  union all
  -- constraints of tables (and domains)
  select 'constraint', coalesce(r.relname, t.typname) || '.' || k.conname,
         format('%s %s', k.contype, pg_get_constraintdef(k.oid))
  from pg_constraint k
  left join rels r on r.oid = k.conrelid
  left join pg_type t on t.oid = k.contypid
  where k.connamespace = 'pgflow'::regnamespace
    and (r.oid is not null or t.oid is not null)
  union all
  -- indexes
  select 'index', i.relname::text, pg_get_indexdef(i.oid)
  from pg_index x
  join rels r on r.oid = x.indrelid
  join pg_class i on i.oid = x.indexrelid
  union all
  -- triggers (not the internal ones of foreign keys)
  select 'trigger', r.relname || '.' || g.tgname, pg_get_triggerdef(g.oid)
  from pg_trigger g
  join rels r on r.oid = g.tgrelid
  where not g.tgisinternal
  union all
  -- types other than row and array types of relations: composites (attributes in order),
  -- enums, domains
  select 'type', t.typname::text,
         format('typtype=%s %s', t.typtype,
                case t.typtype
                  when 'c' then (select string_agg(a.attname || ' '
                                                   || format_type(a.atttypid, a.atttypmod),
                                                   ', ' order by a.attnum)
                                 from pg_attribute a
                                 where a.attrelid = t.typrelid and a.attnum > 0
                                   and not a.attisdropped)
                  when 'e' then (select string_agg(e.enumlabel, ', ' order by e.enumsortorder)
                                 from pg_enum e where e.enumtypid = t.oid)
                  when 'd' then format_type(t.typbasetype, t.typtypmod)
                                || case when t.typnotnull then ' not null' else '' end
                                || coalesce(' default ' || t.typdefault, '')
                  else ''
                end)
  from pg_type t
  left join pg_class c on c.oid = t.typrelid
  where t.typnamespace = 'pgflow'::regnamespace
    and (t.typrelid = 0 or c.relkind = 'c')
    and t.typcategory <> 'A'
  union all
  -- functions and procedures: signature, result, attributes, settings and body
  select 'function', p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
         format('returns %s language=%s kind=%s volatile=%s parallel=%s strict=%s '
                || 'secdef=%s config=%s args=%s body_md5=%s',
                pg_get_function_result(p.oid), l.lanname, p.prokind, p.provolatile,
                p.proparallel, p.proisstrict, p.prosecdef,
                coalesce(array_to_string(p.proconfig, ','), ''),
                pg_get_function_arguments(p.oid), md5(p.prosrc))
  from pg_proc p
  join pg_language l on l.oid = p.prolang
  where p.pronamespace = 'pgflow'::regnamespace
  union all
  -- view queries
  select 'view', r.relname::text, pg_get_viewdef(r.oid)
  from rels r
  where r.relkind in ('v', 'm')
) catalog
order by kind, name, definition;
