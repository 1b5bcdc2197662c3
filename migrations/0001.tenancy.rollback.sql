DROP TABLE IF EXISTS credential_queue_grants;
DROP TABLE IF EXISTS credentials;
DROP TABLE IF EXISTS queues;
DROP TABLE IF EXISTS applications;
DROP TABLE IF EXISTS namespaces;
