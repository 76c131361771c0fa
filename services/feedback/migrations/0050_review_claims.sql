-- Review claims (issue 28; services/feedback/claims.py, repository/claims.py): a lease on one report for
-- one review session (ClaimFeedback), so two reviewers of one owner's queue do not work the same item.
-- A row whose expire_time has passed is no claim (every read filters on it) and is taken over by the next
-- ClaimFeedback; it goes with its report.
CREATE TABLE feedback_claims (
    feedback_id text        PRIMARY KEY REFERENCES feedback (id) ON DELETE CASCADE,
    owner       text        NOT NULL,
    claimant    text        NOT NULL,
    session     text        NOT NULL,
    expire_time timestamptz NOT NULL
);
