-- The least privileges an application role needs on one eventstore-postgres storage, for
-- deployments where another role owns the schema (init mode Validate or None). The prefix
-- is written __prefix__ and the application role __app_role__.

-- Events are only ever added: no UPDATE, no DELETE.
GRANT SELECT, INSERT ON __prefix__events TO __app_role__;
GRANT USAGE ON SEQUENCE __prefix__events_position_seq TO __app_role__;
-- The tag index is read; the trigger of an insert writes it with its owner's privileges.
GRANT SELECT ON __prefix__event_tags TO __app_role__;
-- Reads run their pages through this function, with the caller's privileges.
GRANT EXECUTE ON FUNCTION __prefix__read_page(text, text[]) TO __app_role__;

-- Bookmarks are placed (insert or update) and removed.
GRANT SELECT, INSERT, UPDATE, DELETE ON __prefix__bookmarks TO __app_role__;

-- Lease rows are never deleted (a release backdates the heartbeat, so tokens never repeat).
GRANT SELECT, INSERT, UPDATE ON __prefix__leases TO __app_role__;

-- Contenders are registered, refreshed, withdrawn on release and forgotten when long gone.
GRANT SELECT, INSERT, UPDATE, DELETE ON __prefix__lease_contenders TO __app_role__;

-- The lease functions run with the caller's privileges (SECURITY INVOKER).
GRANT EXECUTE ON FUNCTION __prefix__request_leases(text[], text[], bigint[], interval[], text)
    TO __app_role__;
GRANT EXECUTE ON FUNCTION __prefix__request_plain_leases(text[], text[], bigint[], interval[],
                                                         text)
    TO __app_role__;
GRANT EXECUTE ON FUNCTION __prefix__request_lease(text, text, bigint, interval, text)
    TO __app_role__;
GRANT EXECUTE ON FUNCTION __prefix__release_lease(text, text, text) TO __app_role__;
GRANT EXECUTE ON FUNCTION __prefix__release_leases(text[], text, text) TO __app_role__;
GRANT EXECUTE ON FUNCTION __prefix__token_base() TO __app_role__;
GRANT EXECUTE ON FUNCTION __prefix__check_fence(text, bigint, text) TO __app_role__;
