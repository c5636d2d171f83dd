-- Drops every object of one eventstore-postgres storage (the prefix is written __prefix__).
-- Used by the Recreate init mode, in the same transaction as schema.sql.
DROP FUNCTION IF EXISTS __prefix__request_leases(text[], text[], bigint[], interval[], text);
DROP FUNCTION IF EXISTS __prefix__request_plain_leases(text[], text[], bigint[], interval[], text);
DROP FUNCTION IF EXISTS __prefix__request_lease(text, text, bigint, interval, text);
DROP FUNCTION IF EXISTS __prefix__release_leases(text[], text, text);
DROP FUNCTION IF EXISTS __prefix__release_lease(text, text, text);
DROP FUNCTION IF EXISTS __prefix__token_base();
DROP FUNCTION IF EXISTS __prefix__check_fence(text, bigint, text);
DROP TABLE IF EXISTS __prefix__bookmarks;
DROP TABLE IF EXISTS __prefix__event_tags;
DROP TABLE IF EXISTS __prefix__lease_contenders;
DROP TABLE IF EXISTS __prefix__leases;
DROP TABLE IF EXISTS __prefix__events;
DROP FUNCTION IF EXISTS __prefix__read_page(text, text[]);
DROP FUNCTION IF EXISTS __prefix__index_event_tags();
