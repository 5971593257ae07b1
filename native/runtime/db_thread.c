/* Whether a repeater thread still records (db_thread.h). */
#include "db_env.h"
#include "db_thread.h"

static __thread int tls_muted;

int db_thread_recording(void) { return !tls_muted && db_recording(); }
int db_thread_records_wanted(void) { return !tls_muted && db_records_wanted(); }
void db_thread_mute(void) { tls_muted = 1; }

void db_thread_unmute_if_stopped(void)
{
    if (tls_muted && !db_recording())
        tls_muted = 0;
}
