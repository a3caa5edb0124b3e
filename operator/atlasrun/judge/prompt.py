"""The claims-judge prompt (MCP-Atlas, Appendix C), versioned and hashed."""

from __future__ import annotations

import hashlib

PROMPT_VERSION = "mcp-atlas-appendix-c/2"

CLAIM_JUDGE_PROMPT = """You are evaluating how well a model's response addresses a specific expert-defined claim.

SCORING CRITERIA:
- fulfilled: Claim is completely and accurately addressed. The response covers all key details.
- partially_fulfilled: Claim is partially addressed. The response covers some but not all key details.
- not_fulfilled: Claim is not addressed. The response does not include any key details.

NUMERICAL COMPARISON GUIDELINES:
- For numerical values, use reasonable approximation thresholds:
  * Exact match NOT required for decimals
  * Values within 5% of the claimed number are considered matching
  * For percentages, ±1 percentage points is acceptable
  * Round to appropriate significant figures based on context
- Consider the precision appropriate to the domain:
  * Scientific measurements may need higher precision
  * General statistics/estimates can have looser matching
  * Financial figures should match to reasonable business precision (e.g., millions/billions don't need exact cents)
- If a number is expressed differently but mathematically equivalent (e.g., "0.5" vs "50%" vs "half"), consider it a match

CLAIM TO EVALUATE:
{claim}

MODEL RESPONSE TO ANALYZE:
{response}

INSTRUCTIONS:
1. Determine if the core requirement of the claim is met in the response
2. Check if all key components from the claim appear substantively in the response
   - For numerical values, apply the flexible matching guidelines above
   - Focus on whether the same magnitude and meaning are conveyed
3. Assign the appropriate coverage_outcome
4. Provide specific justification referencing what was/wasn't covered
   - When numbers differ slightly, note if they're within acceptable range
5. Provide a confidence level (0.0-1.0) for your assessment

Be rigorous but fair in your assessment. Focus on whether the response conveys the same information as the claim, not on exact numerical precision unless precision is critical to the claim's meaning.

Answer with a JSON object only:
{{"coverage_outcome": "fulfilled" | "partially_fulfilled" | "not_fulfilled", "justification": "...", "confidence": 0.0-1.0}}"""

PROMPT_SHA256 = hashlib.sha256(CLAIM_JUDGE_PROMPT.encode()).hexdigest()
