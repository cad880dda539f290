-- examlops-policy on PostgreSQL with least privilege: two roles.
--
--   owner (default exa_owner)  owns the database, the schema and every table in it; runs the
--                              migrations. Used only to migrate (once per exa upgrade).
--   app   (default exa_app)    what every `exa` process uses day to day. Owns nothing:
--                              SELECT, INSERT on every table, and UPDATE only of the columns exa
--                              changes after a row is written (state: version, fleet_version,
--                              layout; pools: spec, count, its times, held_outside, version, free,
--                              capacity, removal; decisions: release, lease, job and submission
--                              columns, what reconcile and preemption record; allocations:
--                              released_at; holdings: node and device, which the upgrade to nodes
--                              maps old grants to; queue: a waiting row's state, the placement that
--                              admitted it, when it ended and why); no UPDATE of anything else
--                              (a decision's devices, region, pool, record) and no DELETE but of
--                              node_usage (what a scheduler reports busy node by node, replaced
--                              whole with each report): exa deletes no other row.
--                              SELECT only on schema_migrations; USAGE, SELECT on the schema's
--                              sequences. No CREATE on the schema (or any other), no TEMP, no
--                              TRUNCATE, REFERENCES or TRIGGER; not being an owner it cannot ALTER
--                              or DROP a table, nor disable audit_log's append-only triggers.
--                              Without table-wide UPDATE, DELETE or TRUNCATE it cannot LOCK a
--                              state table in a mode that stops other writers either.
--
-- What the app role may still change (release a placement, move a lease, record a job, edit a
-- pool) is what exa does through it, and each change is an audit entry: `exa audit verify`
-- rebuilds the state from the chain and names every column and row that differs from it.
-- A session of the app role can still hold exa's advisory write lock (any role may take advisory
-- locks): every exa waits at most lock_timeout (10 s) for it per attempt, a bounded number of
-- attempts, then fails with exit 6 naming the session that holds it.
--
-- Run it with psql as a superuser, connected to any database of the cluster (it \connects to the
-- state database itself, as the same user).  ON_ERROR_STOP is set: the first error ends the run.
-- Values come from psql variables, each optional (defaults in brackets):
--
--   owner [exa_owner]  app [exa_app]  dbname [exa]  schema [exa]
--   owner_password, app_password  [unset: the role's password is left as it is]
--
--   psql -d postgres -v owner=exa_owner -v app=exa_app -v dbname=exa -v schema=exa \
--        -v owner_password="$OWNER_PW" -v app_password="$APP_PW" \
--        -f docs/postgres-least-privilege.sql
--
-- (Passwords on the command line show in `ps`; `\password exa_owner` in psql is the quiet way.)
--
-- The order of operations, first install and every exa upgrade alike:
--
--   1. Run this file: roles, database, schema, default privileges (nothing else on a new database).
--   2. Migrate as the owner: run any exa command once with the owner's URL, e.g.
--        EXA_DB_URL=postgresql://exa_owner:PW@HOST/exa exa hardware pools
--      Every exa applies pending migrations when it opens the state (and only reads when none
--      are pending). The app role cannot apply one (no CREATE) and says so, writing nothing:
--      "... may not migrate the state (permission denied for schema exa); run any exa command
--      once with EXA_DB_URL set to the URL of the role that owns the schema ...".
--   3. Run this file again: it sets the app role's grants on the tables the migrations made.
--      Until then the default privileges below give it SELECT, INSERT on a new table, no more.
--   4. Everything else uses the app role: EXA_DB_URL=postgresql://exa_app:PW@HOST/exa
--
-- Both roles get search_path = <schema> in this database, so their URLs need no options and both
-- take the same write lock (exa keys its advisory lock on current_schema(): every exa sharing the
-- state must see the same schema first).
--
-- Idempotent: roles, database and schema are created when missing and corrected when present
-- (attributes, owners); the app role's table grants are reset to exactly the set above in one
-- transaction, so a rerun also removes anything granted by hand since.

\set ON_ERROR_STOP on

\if :{?owner}
\else
  \set owner exa_owner
\endif
\if :{?app}
\else
  \set app exa_app
\endif
\if :{?dbname}
\else
  \set dbname exa
\endif
\if :{?schema}
\else
  \set schema exa
\endif

-- -- roles (cluster-wide) ---------------------------------------------------------------------

SELECT format('CREATE ROLE %I LOGIN', :'owner')
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'owner') \gexec
SELECT format('CREATE ROLE %I LOGIN', :'app')
 WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'app') \gexec
-- No role attribute beyond LOGIN, whatever the roles had before.
ALTER ROLE :"owner" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
ALTER ROLE :"app" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
\if :{?owner_password}
ALTER ROLE :"owner" PASSWORD :'owner_password';
\endif
\if :{?app_password}
ALTER ROLE :"app" PASSWORD :'app_password';
\endif

-- The app role must not act as the owner: a direct membership is revoked; an indirect one (through
-- another role) is an error for the DBA to resolve.
SELECT format('REVOKE %I FROM %I', :'owner', :'app')
 WHERE EXISTS (SELECT FROM pg_auth_members m
                WHERE m.roleid = (SELECT oid FROM pg_roles WHERE rolname = :'owner')
                  AND m.member = (SELECT oid FROM pg_roles WHERE rolname = :'app')) \gexec
SELECT set_config('exa_setup.owner', :'owner', false) AS exa_setup_owner,
       set_config('exa_setup.app', :'app', false) AS exa_setup_app \gset
DO $$
BEGIN
    IF current_setting('exa_setup.owner') = current_setting('exa_setup.app') THEN
        RAISE EXCEPTION 'the owner and the app role must be two roles (both are %)', current_setting('exa_setup.app');
    END IF;
    IF pg_has_role(current_setting('exa_setup.app'), current_setting('exa_setup.owner'), 'MEMBER') THEN
        RAISE EXCEPTION 'role % is a member of % through another role: revoke that membership',
            current_setting('exa_setup.app'), current_setting('exa_setup.owner');
    END IF;
END
$$;

-- -- the database, owned by the owner ----------------------------------------------------------

-- CREATE DATABASE cannot run inside a transaction or a DO block: \gexec runs it on its own.
SELECT format('CREATE DATABASE %I OWNER %I', :'dbname', :'owner')
 WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'dbname') \gexec
ALTER DATABASE :"dbname" OWNER TO :"owner";
-- Nobody else connects or makes temporary tables; the app role connects, nothing more.
REVOKE ALL ON DATABASE :"dbname" FROM PUBLIC;
REVOKE ALL ON DATABASE :"dbname" FROM :"app";
GRANT CONNECT ON DATABASE :"dbname" TO :"app";

-- -- inside the database (as the same superuser), in one transaction ------------------------------

\connect :"dbname"
BEGIN;

-- The schema holding exa's tables, owned by the owner; the app role may look names up in it.
SELECT format('CREATE SCHEMA %I AUTHORIZATION %I', :'schema', :'owner')
 WHERE NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = :'schema') \gexec
ALTER SCHEMA :"schema" OWNER TO :"owner";
REVOKE ALL ON SCHEMA :"schema" FROM PUBLIC;
REVOKE ALL ON SCHEMA :"schema" FROM :"app";
GRANT USAGE ON SCHEMA :"schema" TO :"app";
-- PostgreSQL 14 and older let everyone create in `public` (15 no longer does): not here.
SELECT format('REVOKE CREATE ON SCHEMA public FROM PUBLIC, %I', :'app')
 WHERE EXISTS (SELECT FROM pg_namespace WHERE nspname = 'public') \gexec

ALTER ROLE :"owner" IN DATABASE :"dbname" SET search_path = :"schema";
ALTER ROLE :"app" IN DATABASE :"dbname" SET search_path = :"schema";

-- What the app role gets on tables and sequences the owner creates later (a migration of a newer
-- exa): read and append at once, so step 3 is not urgent for a new table of records; UPDATE and
-- DELETE only by name, below, after review.
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA :"schema" REVOKE ALL ON TABLES FROM :"app";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA :"schema" GRANT SELECT, INSERT ON TABLES TO :"app";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA :"schema" REVOKE ALL ON SEQUENCES FROM :"app";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA :"schema" GRANT USAGE, SELECT ON SEQUENCES TO :"app";

-- -- the app role's grants on the tables that exist (none before the first migration) ------------

-- From nothing, so a rerun leaves exactly this (TRUNCATE, REFERENCES, TRIGGER are never granted).
REVOKE ALL ON ALL TABLES IN SCHEMA :"schema" FROM PUBLIC, :"app";
REVOKE ALL ON ALL SEQUENCES IN SCHEMA :"schema" FROM PUBLIC, :"app";
-- Every table: read and append (a table this file does not name yet is treated as records).
GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA :"schema" TO :"app";
-- burst_events.id is an identity column: INSERT advances its sequence without a grant on it; a
-- serial column of a later migration would need USAGE.
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA :"schema" TO :"app";
-- The state tables: only the columns that change after a row is written, as placements are
-- released, leases renewed, jobs recorded, pools edited, drained, removed or registered again
-- under a removed pool's name, old grants mapped to their nodes and node usage reported; as
-- reconcile records what schedulers say of jobs and nodes, a preemption marks its victims, and
-- a queued workload is admitted, cancelled or fails, and a service token is revoked.
SELECT format('GRANT UPDATE (%s) ON TABLE %I.%I TO %I', cols, n.nspname, c.relname, :'app')
  FROM (VALUES ('state', 'version, fleet_version, layout'),
               ('pools', 'spec, count, created_at, updated_at, held_outside, version, free, capacity, removed_at, removing_since'),
               ('decisions', 'released_at, released_ts, lease_expires_at, lease_expires_ts, job_id, scheduler, job_uid, job_state, submitted_at, '
                             'job_started_at, job_ended_at, node_down_at, preempting_for'),
               ('queue', 'state, admitted_by, ended_at, message, attempts, version'),
               ('allocations', 'released_at'),
               ('holdings', 'node, device'),
               ('api_tokens', 'revoked_at')) AS g(tbl, cols)
  JOIN pg_class c ON c.relname = g.tbl JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = :'schema' AND c.relkind IN ('r', 'p')
 ORDER BY c.relname \gexec
-- node_usage: what a scheduler reports busy node by node, each report replacing the pool's rows
-- (every report an audit entry that exa audit verify holds the table to). DELETE also lets the
-- app role LOCK this one table; a write that waits on it gives up after the bounded waits.
SELECT format('GRANT DELETE ON TABLE %I.node_usage TO %I', :'schema', :'app')
 WHERE to_regclass(format('%I.node_usage', :'schema')) IS NOT NULL \gexec
-- Which migrations ran is read, never written, by the app role (it cannot apply one anyway).
SELECT format('REVOKE INSERT ON TABLE %I.schema_migrations FROM %I', :'schema', :'app')
 WHERE to_regclass(format('%I.schema_migrations', :'schema')) IS NOT NULL \gexec
-- audit_log, burst_events, capacity_log, fleets, verdict_sets and node_grants keep SELECT, INSERT:
-- the audit chain and the records it covers are appended to, never changed. (audit_log's triggers refuse UPDATE, DELETE
-- and TRUNCATE even for the owner; without the privilege the app role is refused before them.)

COMMIT;

-- What the app role may do now, for the record (UPDATE (...): only those columns).
SELECT c.relname AS "table",
       concat_ws(', ', string_agg(p.privilege_type, ', ' ORDER BY p.privilege_type),
                 (SELECT 'UPDATE (' || string_agg(a.attname, ', ' ORDER BY a.attnum) || ')'
                    FROM pg_attribute a
                   WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                     AND NOT has_table_privilege(:'app', c.oid, 'UPDATE')
                     AND has_column_privilege(:'app', c.oid, a.attnum, 'UPDATE'))) AS "app role may"
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS p(privilege_type)
 WHERE n.nspname = :'schema' AND c.relkind IN ('r', 'p')
   AND has_table_privilege(:'app', c.oid, p.privilege_type)
 GROUP BY c.oid, c.relname ORDER BY c.relname;
