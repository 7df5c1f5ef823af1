/* Files built into the programs, so an installed program needs no data path. */
#define EMBED(symbol, file)                                           \
	__asm__(".section .rodata\n"                                  \
		".global " #symbol "\n"                               \
		".type " #symbol ", @object\n"                        \
		#symbol ":\n"                                         \
		".incbin \"" file "\"\n"                              \
		".byte 0\n"                                           \
		".previous\n")

EMBED(idem_tpl_seed, "templates/seed.yaml");
EMBED(idem_tpl_ticket, "templates/ticket.md");
EMBED(idem_sql_queue, "lib/queue.sql");
EMBED(idem_sql_queue_idem, "lib/queues/idem.sql");
EMBED(idem_sql_queue_pgboss, "lib/queues/pg-boss.sql");
EMBED(idem_sql_queue_graphile, "lib/queues/graphile-worker.sql");
EMBED(idem_tpl_handoff, "templates/handoff.md");
