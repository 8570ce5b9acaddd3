"""What the tests' PostgreSQL runs share: the state secret a shared database needs."""

POSTGRES_SECRET = "a-test-secret"  # state.secret of every PostgreSQL run
