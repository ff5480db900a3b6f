-- Tenants own their definitions (issue 16). A row's tenant is who registered it and who may
-- list and start it; NULL marks the shared, read-only built-in set (the shipped trip,
-- registered by the system), which every tenant sees. Rows stored before this migration
-- had no owner and were visible to all, so they become shared.
--
-- Within one owner (the shared set counting as one) a name and version still name one
-- content. The hash is no longer unique on its own: two tenants may register the same
-- content, and a saga's SagaStarted names its hash, which loads that content whoever holds
-- it (the saga itself is bound to its tenant).
ALTER TABLE eventstore.definitions
    ADD COLUMN tenant text CONSTRAINT definitions_tenant_not_blank CHECK (tenant <> '');

ALTER TABLE eventstore.definitions DROP CONSTRAINT definitions_pkey;
ALTER TABLE eventstore.definitions DROP CONSTRAINT definitions_hash_key;

ALTER TABLE eventstore.definitions
    ADD CONSTRAINT definitions_owner_name_version_key
    UNIQUE NULLS NOT DISTINCT (tenant, name, version);

-- Loading by content hash (a saga's SagaStarted) and "is this name shared?" both stay one
-- index probe.
CREATE INDEX definitions_hash_idx ON eventstore.definitions (hash);
CREATE INDEX definitions_shared_name_idx ON eventstore.definitions (name, version)
    WHERE tenant IS NULL;
