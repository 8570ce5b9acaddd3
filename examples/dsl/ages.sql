-- How many users of each age, written in GeaFlow's row format to out/ages/, and the names printed.
CREATE TABLE users (
  id bigint,
  name varchar,
  age int
) WITH (
  type = 'file',
  geaflow.dsl.file.path = 'examples/dsl/users.txt'
);

CREATE TABLE ages (
  age int,
  cnt bigint,
  avg_id double
) WITH (
  type = 'file',
  geaflow.dsl.file.path = 'out/ages'
);

INSERT INTO ages
SELECT age, count(id), avg(id) FROM users GROUP BY age;

SELECT name FROM users WHERE age > 15 ORDER BY name;
