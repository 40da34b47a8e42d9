SELECT partition, next_offset
FROM projection_offsets
WHERE projection = $1 AND generation = $2 AND topic = $3;
