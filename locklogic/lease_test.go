package locklogic

import "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

// slotView returns slot k of a semaphore item as a lock item, through the
// one table of lease names: a test judges a slot with the lock's judges
// and so checks that both layouts name the same lease.
func slotView(item map[string]types.AttributeValue, k int) map[string]types.AttributeValue {
	if item == nil {
		return nil
	}
	view := make(map[string]types.AttributeValue, 8)
	for _, code := range []string{pOwner, pPrin, pTok, pAcq, pRen, pExp, pDelay, pFree, pRel, pGrant, pRelID, pForce, pFOwn, pFTok, pFAcq, pRec} {
		if v, ok := item[slotNames[k].attr(code)]; ok {
			view[lockLease.attr(code)] = v
		}
	}
	return view
}
