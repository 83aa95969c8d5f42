/// The PostgreSQL schema, as named migrations of literal SQL, one statement per string (the
/// extended protocol runs one statement at a time). Shipped migrations are frozen history:
/// change the schema by appending one. `PostgresStorage.migrate` runs the missing ones in
/// order, each in its own transaction, holding an advisory lock so that nodes starting
/// together do not race.
///
/// Layout (docs/scale-out.md): tables of the logical databases will be keyed first by
/// `database_id`, the distribution column; what is read per user (notifications, push tokens,
/// badges) by `user_id`; accounts are small reference tables. Strings that are keys or sort
/// keys are `COLLATE "C"`, so their order is byte order, as on SQLite.
enum PostgresMigrations {
    static let all: [(name: String, statements: [String])] = [
        (
            "v1-accounts-and-push",
            [
                """
                CREATE TABLE meta (
                    key text COLLATE "C" PRIMARY KEY,
                    value bytea NOT NULL
                )
                """,
                """
                CREATE TABLE containers (
                    id text COLLATE "C" PRIMARY KEY,
                    created_at bigint NOT NULL
                )
                """,
                """
                CREATE TABLE api_tokens (
                    token_hash text COLLATE "C" PRIMARY KEY,
                    container text COLLATE "C" NOT NULL REFERENCES containers (id) ON DELETE CASCADE,
                    environment text NOT NULL,
                    created_at bigint NOT NULL,
                    revoked boolean NOT NULL DEFAULT false,
                    allowed_origins text NOT NULL DEFAULT '*'
                )
                """,
                "CREATE INDEX api_tokens_by_container ON api_tokens (container, environment)",
                """
                CREATE TABLE users (
                    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    name text COLLATE "C" NOT NULL UNIQUE,
                    password_hash text NOT NULL,
                    created_at bigint NOT NULL
                )
                """,
                """
                CREATE TABLE sessions (
                    token_hash text COLLATE "C" PRIMARY KEY,
                    user_id bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
                    container text COLLATE "C" NOT NULL,
                    environment text NOT NULL,
                    created_at bigint NOT NULL,
                    last_used_at bigint NOT NULL
                )
                """,
                "CREATE INDEX sessions_by_user ON sessions (user_id)",
                // Starting a session removes idle ones: without this, a scan of every session.
                "CREATE INDEX sessions_by_last_use ON sessions (last_used_at)",
                """
                CREATE TABLE push_tokens (
                    token text COLLATE "C" PRIMARY KEY,
                    container text COLLATE "C" NOT NULL,
                    environment text NOT NULL,
                    user_id bigint NOT NULL,
                    apns_environment text NOT NULL,
                    web_courier boolean NOT NULL,
                    device_id text NOT NULL,
                    created_at bigint NOT NULL
                )
                """,
                "CREATE INDEX push_tokens_by_owner ON push_tokens (user_id, container, environment)",
                """
                CREATE TABLE apns_credentials (
                    container text COLLATE "C" PRIMARY KEY REFERENCES containers (id),
                    team_id text NOT NULL,
                    key_id text NOT NULL,
                    topic text NOT NULL,
                    private_key text NOT NULL,
                    updated_at bigint NOT NULL
                )
                """,
            ]
        )
    ]
}
