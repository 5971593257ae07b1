/* db_thread.h: whether the calling repeater thread still records in this session.
 *
 * A repeater thread that has flushed for the end of a session (db_flush_all) records nothing
 * more, so that each doorbell it recorded has its WQEs recorded too.  It records again once it has
 * seen recording off, ready for the next session.  The repeater and WQE recovery both ask here,
 * on the repeater's thread.
 */
#ifndef SIGMATRACE_DB_THREAD_H
#define SIGMATRACE_DB_THREAD_H

/* Recording on, and this thread has not flushed for the session's end. */
int db_thread_recording(void);
/* The same, and per-event records are wanted (not aggregate mode). */
int db_thread_records_wanted(void);
/* This thread flushed for the session's end: it records nothing more in this session. */
void db_thread_mute(void);
/* Once recording is off, a muted thread is ready for the next session. */
void db_thread_unmute_if_stopped(void);

#endif
