DROP TABLE IF EXISTS audit_records;
DROP TABLE IF EXISTS events;
DROP TABLE IF EXISTS checkpoints;
DROP TABLE IF EXISTS step_activations;
DROP TABLE IF EXISTS instances;
DROP TABLE IF EXISTS definitions;
